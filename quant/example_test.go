package quant_test

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/quant"
)

// A rank quantizes its gradient to 4 bits per value, and the receiver adds
// it into its accumulator. Buffers are sized once with EncodedSize and
// reused on every step.
func Example() {
	grad := []float32{0.5, -1, 0.25, 0, 1, -0.75, 0.125, 0.875}
	codec, err := quant.New(quant.Q4, quant.Options{BucketSize: 4, Seed: 1})
	if err != nil {
		panic(err)
	}
	wire := make([]byte, codec.EncodedSize(len(grad)))
	enc, err := codec.Encode(wire, grad)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d values: %d bytes instead of %d\n", len(grad), len(enc), 4*len(grad))

	acc := make([]float32, len(grad))
	if err := codec.DecodeAdd(acc, enc); err != nil {
		panic(err)
	}
	// Each value is within one step (bucket max/7) of the input, and equal
	// to it on average; the bucket maxima are exact.
	fmt.Println(acc[1], acc[4])
	// Output:
	// 8 values: 12 bytes instead of 32
	// -1 1
}

func ExampleParseKind() {
	kind, err := quant.ParseKind("bf16")
	if err != nil {
		panic(err)
	}
	codec, _ := quant.New(kind, quant.Options{})
	fmt.Println(kind, codec.EncodedSize(1000))
	_, err = quant.ParseKind("q3")
	fmt.Println(err)
	// Output:
	// bf16 2000
	// quant: unknown codec "q3" (want one of none, fp16, bf16, q8, q4, q2)
}

func ExampleFloat32ToFP16() {
	for _, x := range []float32{1, 65504, 65520, 0x1p-24, 0x1p-25} {
		h := quant.Float32ToFP16(x)
		fmt.Printf("%g -> %#04x -> %g\n", x, h, quant.FP16ToFloat32(h))
	}
	// Output:
	// 1 -> 0x3c00 -> 1
	// 65504 -> 0x7bff -> 65504
	// 65520 -> 0x7c00 -> +Inf
	// 5.9604645e-08 -> 0x0001 -> 5.9604645e-08
	// 2.9802322e-08 -> 0x0000 -> 0
}

func ExampleFloat32ToBF16() {
	h := quant.Float32ToBF16(3.14159)
	fmt.Printf("%#04x %g\n", h, quant.BF16ToFloat32(h))
	// Output: 0x4049 3.140625
}

// Sparse indices compress to about 1-2 bytes each instead of 4; the
// receiver learns the count first, then decodes into a reused buffer.
func ExampleEncodeIndices() {
	idx := []uint32{3, 4, 5, 6, 7, 100, 101, 4000, 70000}
	buf := make([]byte, quant.MaxIndicesSize(len(idx), quant.IndexAuto))
	enc, err := quant.EncodeIndices(buf, idx, quant.IndexAuto)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d indices in %d bytes (method %s)\n", len(idx), len(enc), quant.IndexMethod(enc[0]))

	n, err := quant.DecodedIndexCount(enc)
	if err != nil {
		panic(err)
	}
	got, err := quant.DecodeIndices(make([]uint32, n), enc, 100000)
	fmt.Println(got, err)
	// Output:
	// 9 indices in 14 bytes (method varint)
	// [3 4 5 6 7 100 101 4000 70000] <nil>
}

// A stochastic codec can refuse NaN and Inf instead of poisoning the
// bucket, naming the offending index.
func ExampleNonFiniteError() {
	codec, _ := quant.New(quant.Q8, quant.Options{NonFinite: quant.NonFiniteReject})
	x := []float32{1, 2, float32(math.Inf(1)), 4}
	_, err := codec.Encode(make([]byte, codec.EncodedSize(len(x))), x)
	fmt.Println(err)
	// Output: quant: cannot quantize non-finite value +Inf at index 2
}
