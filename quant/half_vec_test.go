package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// The vector kernels (half_amd64.s) must give bit-identical results to the
// scalar loops, which the tests in half_test.go check against references
// written from the definition. These tests feed both paths the same input
// and compare bits; on CPUs or architectures without the kernels the
// Vec functions do nothing and the tests only check that.

// halfKernel is one codec direction, scalar and vector.
type halfKernel struct {
	name      string
	have      *bool
	encodeGo  func([]byte, []float32)
	encodeVec func([]byte, []float32) int
	decodeGo  func([]float32, []byte, bool)
	decodeVec func([]float32, []byte, bool) int
}

var halfKernels = []halfKernel{
	{"fp16", &useF16C, encodeFP16Go[float32], encodeFP16Vec, decodeFP16Go[float32], decodeFP16Vec},
	{"bf16", &useAVX2, encodeBF16Go[float32], encodeBF16Vec, decodeBF16Go[float32], decodeBF16Vec},
}

// checkEncode encodes src both ways and compares every output byte. The
// vector kernel must do all but a tail shorter than its width.
func (k halfKernel) checkEncode(t testing.TB, src []float32) {
	t.Helper()
	want := make([]byte, 2*len(src))
	k.encodeGo(want, src)
	got := make([]byte, 2*len(src))
	n := k.encodeVec(got, src)
	if *k.have && len(src)-n >= 16 {
		t.Fatalf("%s: vector encode did %d of %d values", k.name, n, len(src))
	}
	k.encodeGo(got[2*n:], src[n:])
	for i := range src {
		w, g := binary.LittleEndian.Uint16(want[2*i:]), binary.LittleEndian.Uint16(got[2*i:])
		if w != g {
			t.Fatalf("%s encode of %v (bits %#08x): vector %#04x, scalar %#04x",
				k.name, src[i], math.Float32bits(src[i]), g, w)
		}
	}
}

// checkDecode decodes src onto acc (or into zeroed memory when acc is nil)
// both ways and compares the float32 bits.
func (k halfKernel) checkDecode(t testing.TB, src []byte, acc []float32) {
	t.Helper()
	n := len(src) / 2
	add := acc != nil
	want, got := make([]float32, n), make([]float32, n)
	if add {
		copy(want, acc)
		copy(got, acc)
	}
	k.decodeGo(want, src, add)
	done := k.decodeVec(got, src, add)
	if *k.have && n-done >= 8 {
		t.Fatalf("%s: vector decode did %d of %d values", k.name, done, n)
	}
	k.decodeGo(got[done:], src[2*done:], add)
	for i := range want {
		// Which NaN x86 keeps for NaN + NaN depends on the operand order
		// the compiler picks for the scalar +=; any NaN is right then.
		bothNaN := add && isNaN32(acc[i]) && isNaN32(want[i]) && isNaN32(got[i])
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) && !bothNaN {
			t.Fatalf("%s decode (add %v) of %#04x at %d: vector %#08x, scalar %#08x",
				k.name, add, binary.LittleEndian.Uint16(src[2*i:]), i,
				math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

// specialFloats are float32 bit patterns at the edges of both formats.
var specialFloats = []uint32{
	0, 0x80000000, 1, 0x807fffff, 0x00800000, // zeros, float32 subnormals, smallest normal
	0x7f800000, 0xff800000, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, // Inf, MaxFloat32 and its rounding edge
	0x7f800001, 0x7fbfffff, 0x7fc00000, 0xffc00001, 0x7fffffff, 0xff800001, 0x7f802000, 0x7f800010, // NaNs
	0x477ff000, 0x477fefff, 0x477ff001, 0xc77ff000, 0x47800000, // 65520: the fp16 overflow tie
	0x38800000, 0x387fffff, 0x337fffff, 0x33000000, 0x33000001, 0x33800000, // fp16 subnormal range edges
}

func TestHalfKernelsMatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var src []float32
	for _, b := range specialFloats {
		src = append(src, math.Float32frombits(b))
	}
	// Every half value of both formats, its neighbours and midpoints.
	for h := range 1 << 16 {
		for _, f := range []float32{FP16ToFloat32(uint16(h)), BF16ToFloat32(uint16(h))} {
			b := math.Float32bits(f)
			src = append(src, f, math.Float32frombits(b+1), math.Float32frombits(b-1))
		}
		src = append(src, math.Float32frombits(uint32(h)<<16|0x8000), math.Float32frombits(uint32(h)<<16|0x7fff))
		if h < 0x7c00 {
			src = append(src, midpoint(h), math.Float32frombits(math.Float32bits(midpoint(h))+1))
		}
	}
	for range 1 << 20 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	// A stride through all float32 patterns (every 251st).
	for b := uint64(0); b < 1<<32; b += 251 {
		src = append(src, math.Float32frombits(uint32(b)))
	}
	halves := make([]byte, 2<<16)
	for h := range 1 << 16 {
		binary.LittleEndian.PutUint16(halves[2*h:], uint16(h))
	}
	acc := make([]float32, 1<<16)
	for i := range acc {
		acc[i] = math.Float32frombits(rng.Uint32()) // NaN, Inf, subnormal accumulators too
	}
	for _, k := range halfKernels {
		t.Run(k.name, func(t *testing.T) {
			k.checkEncode(t, src)
			k.checkDecode(t, halves, nil)
			k.checkDecode(t, halves, acc)
			// Sums that round, overflow and cancel.
			for i := range acc {
				acc[i] = float32(rng.NormFloat64()) * float32(math.Exp2(float64(rng.IntN(40)-20)))
			}
			k.checkDecode(t, halves, acc)
			// Every length and alignment around the vector widths.
			for n := range 70 {
				for off := range 3 {
					k.checkEncode(t, src[off:off+n])
					k.checkDecode(t, halves[2*off:2*(off+n)], nil)
					k.checkDecode(t, halves[2*off+1:2*(off+n)+1], acc[off:off+n])
				}
			}
		})
	}
}

// TestHalfKernelsExhaustive encodes all 2^32 float32 patterns both ways
// (about a minute; set QUANT_EXHAUSTIVE=1).
func TestHalfKernelsExhaustive(t *testing.T) {
	if os.Getenv("QUANT_EXHAUSTIVE") == "" {
		t.Skip("set QUANT_EXHAUSTIVE=1 to compare the kernels on every float32")
	}
	src := make([]float32, 1<<24)
	for _, k := range halfKernels {
		for hi := uint32(0); hi < 1<<8; hi++ {
			for i := range src {
				src[i] = math.Float32frombits(hi<<24 | uint32(i))
			}
			k.checkEncode(t, src)
		}
	}
}

// TestCodecUsesBothPaths runs the public codec API with the vector kernels
// switched off and on and requires identical bytes and values.
func TestCodecUsesBothPaths(t *testing.T) {
	x := testVector(10007, 5)
	x[3] = float32(math.NaN())
	x[4] = float32(math.Inf(-1))
	for _, kind := range []Kind{FP16, BF16} {
		c := mustNew(t, kind, Options{})
		run := func(vec bool) ([]byte, []float32, []float32) {
			savedF, savedA := useF16C, useAVX2
			useF16C, useAVX2 = useF16C && vec, useAVX2 && vec
			defer func() { useF16C, useAVX2 = savedF, savedA }()
			enc := encode(t, c, x)
			dec := decode(t, c, enc, len(x))
			sum := append([]float32(nil), x...)
			if err := c.DecodeAdd(sum, enc); err != nil {
				t.Fatal(err)
			}
			return enc, dec, sum
		}
		e0, d0, s0 := run(false)
		e1, d1, s1 := run(true)
		if string(e0) != string(e1) {
			t.Fatalf("%v: encodings differ", kind)
		}
		for i := range d0 {
			if math.Float32bits(d0[i]) != math.Float32bits(d1[i]) || math.Float32bits(s0[i]) != math.Float32bits(s1[i]) {
				t.Fatalf("%v: value %d differs", kind, i)
			}
		}
	}
}

// FuzzHalfKernels compares the vector and scalar kernels on arbitrary
// bytes: read as float32 patterns to encode, and as a received stream of
// halves to decode and to add onto an accumulator (network bytes).
func FuzzHalfKernels(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 0, 0xc0, 0x7f, 0, 0xf0, 0x7f, 0x47, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x33})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := make([]float32, len(data)/4)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		halves := data[:len(data)&^1]
		acc := make([]float32, len(halves)/2)
		for i := range acc {
			acc[i] = float32(i) - 7.5
		}
		for _, k := range halfKernels {
			k.checkEncode(t, src)
			k.checkDecode(t, halves, nil)
			k.checkDecode(t, halves, acc)
			k.checkDecode(t, halves[:2*len(src)], src) // arbitrary accumulators
		}
	})
}
