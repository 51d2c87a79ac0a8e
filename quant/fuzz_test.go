package quant

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// fuzzCodec builds a codec from two fuzzer-chosen bytes.
func fuzzCodec(kindByte, bucketByte uint8) (Codec, bool) {
	kind := Kind(kindByte % uint8(numKinds))
	bucket := 1 + int(bucketByte)%70 // small buckets: many bucket edges
	if bucketByte == 0 {
		bucket = 0 // default 1024
	}
	c, err := New(kind, Options{BucketSize: bucket, Seed: 1})
	return c, err == nil
}

// largestFitting returns the largest n with EncodedSize(n) <= size.
func largestFitting(c Codec, size int) int {
	lo, hi := 0, 8*size+8 // EncodedSize(n) >= n/4 for every kind
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if c.EncodedSize(mid) <= size {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) || (a == 0 && b == 0)
}

// FuzzDecode feeds arbitrary bytes to every value decoder. It must never
// panic; an accepted stream must have the exact size, decode to finite
// values or NaN (never Inf for the stochastic kinds), and DecodeAdd onto
// zeros must agree with Decode.
func FuzzDecode(f *testing.F) {
	for _, kind := range Kinds() {
		for _, bucket := range []uint8{0, 5, 64} {
			c, _ := fuzzCodec(uint8(kind), bucket)
			x := testVector(150, uint64(bucket))
			x[7] = float32(math.NaN())
			enc, _ := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
			f.Add(uint8(kind), bucket, enc)
		}
	}
	f.Fuzz(func(t *testing.T, kindByte, bucketByte uint8, data []byte) {
		c, ok := fuzzCodec(kindByte, bucketByte)
		if !ok {
			return
		}
		// The raw input with a count that rarely fits: exercises the length check.
		_ = c.Decode(make([]float32, len(data)/3), data)
		// The longest prefix that has a valid length for some count.
		n := largestFitting(c, len(data))
		data = data[:c.EncodedSize(n)]
		out := make([]float32, n)
		err := c.Decode(out, data)
		sum := make([]float32, n)
		errAdd := c.DecodeAdd(sum, data)
		if (err == nil) != (errAdd == nil) {
			t.Fatalf("Decode error %v, DecodeAdd error %v", err, errAdd)
		}
		if err != nil {
			return
		}
		for i := range out {
			if !sameFloat(out[i], sum[i]) {
				t.Fatalf("index %d: Decode %v, DecodeAdd onto 0 %v", i, out[i], sum[i])
			}
			if c.Kind().Stochastic() && math.IsInf(float64(out[i]), 0) {
				t.Fatalf("index %d: infinite value from a stochastic stream", i)
			}
		}
	})
}

// FuzzStochasticRoundTrip encodes arbitrary float32 values and checks each
// decoded value is within one step (scale/s) of its input, or NaN when its
// bucket held a NaN or Inf.
func FuzzStochasticRoundTrip(f *testing.F) {
	f.Add(uint8(3), uint8(4), []byte{0, 0, 128, 63, 0, 0, 0, 192, 1, 2, 3, 4, 0, 0, 128, 127})
	f.Fuzz(func(t *testing.T, kindByte, bucketByte uint8, data []byte) {
		c, _ := fuzzCodec(uint8(Q8)+kindByte%3, bucketByte)
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		enc, err := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(x))
		if err := c.Decode(out, enc); err != nil {
			t.Fatalf("own encoding rejected: %v", err)
		}
		bucket := c.(*codec).bucketSize
		levels := float64(c.(*codec).levels)
		for start := 0; start < len(x); start += bucket {
			b := x[start:min(start+bucket, len(x))]
			var maxAbs float64
			finite := true
			for _, v := range b {
				finite = finite && !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
				maxAbs = max(maxAbs, math.Abs(float64(v)))
			}
			for i, v := range b {
				got := float64(out[start+i])
				if !finite {
					if !math.IsNaN(got) {
						t.Fatalf("index %d: %v in a non-finite bucket", start+i, got)
					}
					continue
				}
				if err := math.Abs(got - float64(v)); err > maxAbs/levels*(1+1e-6) {
					t.Fatalf("index %d: %v decoded as %v, more than a step %v", start+i, v, got, maxAbs/levels)
				}
			}
		}
	})
}

// FuzzDecodeIndices feeds arbitrary bytes to the index decoder: no panic,
// no allocation beyond the caller's buffer, and an accepted stream holds
// strictly increasing indices below dim whose re-encoding is byte-identical
// (there is exactly one valid encoding per method).
func FuzzDecodeIndices(f *testing.F) {
	for _, m := range []IndexMethod{IndexVarint, IndexBitPack} {
		for _, idx := range [][]uint32{{}, {7}, {0, 1, 2, 3, 100, 1000, 1 << 20}, sparseIndices(300, 5000, 1)} {
			enc, _ := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), idx, m)
			f.Add(enc, uint32(0))
			f.Add(enc, uint32(4000))
			f.Add(enc, uint32(math.MaxUint32)) // the offset form with the largest bound
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, dim uint32) {
		count, err := DecodedIndexCount(data)
		if err != nil {
			if _, err2 := DecodeIndices(make([]uint32, 16), data, int(dim)); err2 == nil {
				t.Fatal("DecodeIndices accepted a stream whose header DecodedIndexCount rejected")
			}
			return
		}
		if count > 1<<20 {
			return
		}
		idx, err := DecodeIndices(make([]uint32, count), data, int(dim))
		// The offset form accepts exactly the same streams and adds the
		// offset to every index (an offset that keeps offset+dim within
		// 2^32, which DecodeIndicesOffset requires).
		if dim > 0 {
			offset := uint32(min(1<<20, 1<<32-uint64(dim)))
			shifted, err2 := DecodeIndicesOffset(make([]uint32, count), data, int(dim), offset)
			if (err == nil) != (err2 == nil) {
				t.Fatalf("DecodeIndices error %v, DecodeIndicesOffset error %v", err, err2)
			}
			for i := range shifted {
				if shifted[i] != idx[i]+offset {
					t.Fatalf("offset index %d: %d, want %d", i, shifted[i], idx[i]+offset)
				}
			}
		}
		if err != nil {
			return
		}
		for i := range idx {
			if i > 0 && idx[i] <= idx[i-1] {
				t.Fatalf("not strictly increasing at %d", i)
			}
			if dim > 0 && idx[i] >= dim {
				t.Fatalf("index %d >= dim %d", idx[i], dim)
			}
		}
		again, err := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), IndexMethod(data[0]))), idx, IndexMethod(data[0]))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, data)
		}
	})
}

// FuzzIndicesRoundTrip encodes arbitrary sorted index sets with every
// method and decodes them back.
func FuzzIndicesRoundTrip(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		idx := make([]uint32, len(data)/4)
		for i := range idx {
			// Small values too, so runs and small gaps are common.
			idx[i] = binary.LittleEndian.Uint32(data[4*i:]) >> (data[4*i] % 32)
		}
		slices.Sort(idx)
		idx = slices.Compact(idx)
		for _, m := range indexMethods {
			size, err := IndicesSize(idx, m)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), idx, m)
			if err != nil || len(enc) != size {
				t.Fatalf("%s: err %v, size %d want %d", m, err, len(enc), size)
			}
			got, err := DecodeIndices(make([]uint32, len(idx)), enc, 0)
			if err != nil || !slices.Equal(got, idx) {
				t.Fatalf("%s: err %v, got %v want %v", m, err, got, idx)
			}
			// A buffer of exactly the size takes the size-first path,
			// a large one the one-pass path: the same bytes.
			exact, err := EncodeIndices(make([]byte, size), idx, m)
			if err != nil || !slices.Equal(exact, enc) {
				t.Fatalf("%s: exact-size buffer: err %v, got %x want %x", m, err, exact, enc)
			}
			if len(idx) > 0 {
				// Rebasing in place equals encoding a rebased copy.
				base := idx[0] / 2
				rebased := make([]uint32, len(idx))
				for i, x := range idx {
					rebased[i] = x - base
				}
				want, _ := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), rebased, m)
				from, err := EncodeIndicesFrom(make([]byte, MaxIndicesSize(len(idx), m)), idx, base, m)
				if err != nil || !slices.Equal(from, want) {
					t.Fatalf("%s: EncodeIndicesFrom base %d: err %v, got %x want %x", m, base, err, from, want)
				}
			}
		}
	})
}

// FuzzHalf compares the fast binary16 and bfloat16 conversions with the
// slow references on arbitrary float32 bit patterns.
func FuzzHalf(f *testing.F) {
	f.Add(uint32(0x477ff000))
	f.Add(uint32(0x33000000))
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		if x != x {
			return // NaN handling is covered by the unit tests
		}
		if got, want := Float32ToFP16(x), refFP16(x); got != want {
			t.Fatalf("fp16(%v) = %#04x, want %#04x", x, got, want)
		}
		if got, want := Float32ToBF16(x), refBF16(x); got != want {
			t.Fatalf("bf16(%v) = %#04x, want %#04x", x, got, want)
		}
	})
}
