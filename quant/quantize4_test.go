package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The 4-bit quantizer's vector kernels (quantize4_amd64.s) must give the
// scalar loop's codes bit for bit and leave the generator in the same
// state. These tests run the scalar path and every kernel the CPU has on
// the same input by toggling the use flags; where there is no kernel they
// only run the scalar path.

// q4path is one implementation of the quantizer: the scalar code or a
// vector kernel.
type q4path struct {
	name         string
	avx2, avx512 bool
}

var q4scalar = q4path{name: "scalar"}

// quantize4Paths returns the vector kernels this CPU and build have.
func quantize4Paths() []q4path {
	var paths []q4path
	if useQuantize4AVX2 {
		paths = append(paths, q4path{"avx2", true, false})
		if useQuantize4AVX512 {
			paths = append(paths, q4path{"avx512", true, true})
		}
	}
	return paths
}

// withQuantize4Path runs f with the flags set for path p, and restores
// them.
func withQuantize4Path(p q4path, f func()) {
	saved2, saved512 := useQuantize4AVX2, useQuantize4AVX512
	useQuantize4AVX2, useQuantize4AVX512 = p.avx2 && saved2, p.avx512 && saved512
	defer func() { useQuantize4AVX2, useQuantize4AVX512 = saved2, saved512 }()
	f()
}

// checkQuantize4 quantizes x with scale max|x| from state both ways and
// compares the codes and the final states.
func checkQuantize4(t testing.TB, x []float32, state uint64) {
	t.Helper()
	c := &codec{kind: Q4}
	if err := c.initStochastic(Options{}); err != nil {
		t.Fatal(err)
	}
	var scale float32
	var finite bool
	withQuantize4Path(q4scalar, func() { scale, finite = bucketScale(c, x) })
	if !finite || scale == 0 {
		return
	}
	for _, stretch := range []float64{1, 2} {
		checkQuantize4Step(t, c, x, stretch*7/float64(scale)*0x1p32, state)
	}
}

// checkQuantize4Step is checkQuantize4 for one invStep. invStep may be
// too large for the scale (up to twice), so that levels above 7 come out
// and the clamp is exercised, which it almost never is with the true
// scale; the codes must still match.
func checkQuantize4Step(t testing.TB, c *codec, x []float32, invStep float64, state uint64) {
	t.Helper()
	scale := float32(7 / invStep * 0x1p32)
	size := (4*len(x) + 7) / 8
	run := func(p q4path) ([]byte, uint64) {
		codes := make([]byte, size)
		c.rng.state = state
		withQuantize4Path(p, func() { quantize4(c, codes, x, invStep) })
		return codes, c.rng.state
	}
	want, wantState := run(q4scalar)
	for _, p := range quantize4Paths() {
		got, gotState := run(p)
		if gotState != wantState {
			t.Fatalf("%s, n=%d seed %#x: state %#x, scalar %#x", p.name, len(x), state, gotState, wantState)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s, n=%d seed %#x: byte %d (values %v, %v; scale %v): %#02x, scalar %#02x",
					p.name, len(x), state, i, x[2*i], x[min(2*i+1, len(x)-1)], scale, got[i], want[i])
			}
		}
	}
}

// quantize4Inputs returns test vectors of n values of several kinds.
func quantize4Inputs(n int, rng *rand.Rand) map[string][]float32 {
	in := map[string][]float32{}
	grad := make([]float32, n)
	for i := range grad {
		grad[i] = float32(rng.NormFloat64() * 1e-3)
	}
	in["gradient"] = grad

	// Arbitrary finite bit patterns: every exponent, denormals, ±0.
	bitsVec := make([]float32, n)
	for i := range bitsVec {
		for {
			v := math.Float32frombits(rng.Uint32())
			if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
				bitsVec[i] = v
				break
			}
		}
	}
	in["bits"] = bitsVec

	// Few distinct magnitudes: many values equal to the scale (level 7
	// and the clamp), zeros, negative zeros, denormals.
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.25,
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.Float32frombits(0x007fffff), 1.0 / 7, 3.0 / 7, -6.0 / 7}
	spec := make([]float32, n)
	for i := range spec {
		spec[i] = special[rng.IntN(len(special))]
	}
	in["special"] = spec

	// A denormal-only bucket: the scale itself is tiny.
	tiny := make([]float32, n)
	for i := range tiny {
		tiny[i] = math.Float32frombits(rng.Uint32N(0x800000)) * float32(1-2*int(rng.IntN(2)))
	}
	in["denormal"] = tiny

	// Values whose |x| invStep + 0.5 lies on or next to an integer, and
	// next to multiples of 2^32 (level boundaries), where one rounding
	// more or less would change the code.
	edge := make([]float32, n)
	const scale = 1.7
	invStep := 7 / float64(float32(scale)) * 0x1p32
	for i := range edge {
		target := float64(rng.Uint64N(7<<32)) - 0.5
		if rng.IntN(2) == 0 {
			target = float64(rng.Uint64N(8)<<32) - 0.5 + float64(rng.IntN(5)-2)
		}
		v := float32(max(target, 0) / invStep)
		for range rng.IntN(3) {
			v = math.Nextafter32(v, float32(rng.IntN(2)*2))
		}
		edge[i] = min(v, scale) * float32(1-2*int(rng.IntN(2)))
	}
	if n > 0 {
		edge[rng.IntN(n)] = scale
	}
	in["edge"] = edge
	return in
}

func TestQuantize4KernelMatchesScalar(t *testing.T) {
	if len(quantize4Paths()) == 0 {
		t.Log("no vector kernel on this CPU/build: only the scalar path runs")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	lengths := []int{127, 128, 129, 255, 256, 1000, 1023, 1024, 1025, 4096 + 37}
	for n := range 100 {
		lengths = append(lengths, n)
	}
	seeds := []uint64{0, 1, 77, math.MaxUint64, 0x9e3779b97f4a7c15}
	for _, n := range lengths {
		for name, x := range quantize4Inputs(n, rng) {
			ss := append(seeds, rng.Uint64())
			if n < 40 {
				ss = ss[:2] // short vectors: two seeds are plenty
			}
			for _, seed := range ss {
				t.Run(name, func(t *testing.T) { checkQuantize4(t, x, seed) })
			}
		}
	}
}

// TestQuantize4KernelCovers checks that the kernel does every pair but a
// tail of fewer than 16, and that the maximum kernel does all but 31
// values.
func TestQuantize4KernelCovers(t *testing.T) {
	if !useQuantize4AVX2 {
		t.Skip("no vector kernel")
	}
	x := gradientLike(1000, 3)
	for _, p := range quantize4Paths() {
		withQuantize4Path(p, func() {
			for n := range len(x) / 2 {
				done, state := quantizePairs4Vec(make([]byte, n), x[:2*n], 1e9, 5)
				if done != n&^15 || state != 5+uint64(done)*splitmixGamma {
					t.Fatalf("%s, %d pairs: kernel did %d, state %#x", p.name, n, done, state)
				}
			}
		})
	}
	for n := range len(x) {
		if done, _ := maxAbsBitsVec(x[:n]); done != n&^31 {
			t.Fatalf("%d values: max kernel did %d", n, done)
		}
	}
}

// TestBucketScaleKernel compares bucketScale's two paths, with NaN and
// Inf at every position of short vectors and at random ones of long ones.
func TestBucketScaleKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, mode := range []ScaleMode{ScaleMaxAbs, ScaleL2} {
		c := &codec{kind: Q4}
		if err := c.initStochastic(Options{Scale: mode}); err != nil {
			t.Fatal(err)
		}
		check := func(x []float32) {
			t.Helper()
			var s1, s2 float32
			var f1, f2 bool
			withQuantize4Path(q4scalar, func() { s1, f1 = bucketScale(c, x) })
			s2, f2 = bucketScale(c, x)
			if math.Float32bits(s1) != math.Float32bits(s2) || f1 != f2 {
				t.Fatalf("%s, n=%d: vector %v %v, scalar %v %v", mode, len(x), s2, f2, s1, f1)
			}
		}
		for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 65, 100, 1024, 1500} {
			for _, x := range quantize4Inputs(n, rng) {
				check(x)
				for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
					math.Float32frombits(0xff800001), math.MaxFloat32} {
					positions := []int{rng.IntN(max(n, 1))}
					if n <= 65 {
						positions = positions[:0]
						for i := range n {
							positions = append(positions, i)
						}
					}
					for _, p := range positions {
						if p >= n {
							continue
						}
						y := append([]float32(nil), x...)
						y[p] = bad
						check(y)
					}
				}
			}
		}
	}
}

// TestQuantize4KernelEncode compares whole streams (two Encode calls in a
// row, so the generator state carries over) for several bucket sizes and
// scale modes, with all-zero and poisoned buckets.
func TestQuantize4KernelEncode(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	x := gradientLike(10000, 7)
	clear(x[2048:3072])             // an all-zero default bucket
	x[5000] = float32(math.NaN())   // a poisoned one
	x[7777] = float32(math.Inf(-1)) // and another
	for i := 8000; i < 9000; i++ {
		x[i] = math.Float32frombits(rng.Uint32() & 0x807fffff) // denormals
	}
	for _, bucket := range []int{1, 2, 3, 15, 16, 31, 32, 33, 64, 100, 1000, 1024, 4096, 10000} {
		for _, mode := range []ScaleMode{ScaleMaxAbs, ScaleL2} {
			for _, seed := range []uint64{0, 12345, rng.Uint64()} {
				opts := Options{BucketSize: bucket, Scale: mode, Seed: seed}
				cut := len(x) - rng.IntN(50)
				run := func(p q4path) []byte {
					var out []byte
					withQuantize4Path(p, func() {
						c := mustNew(t, Q4, opts)
						out = append(encode(t, c, x), encode(t, c, x[:cut])...)
					})
					return out
				}
				want := run(q4scalar)
				for _, p := range quantize4Paths() {
					if !bytes.Equal(run(p), want) {
						t.Fatalf("%s, bucket %d, %s, seed %d: streams differ", p.name, bucket, mode, seed)
					}
				}
			}
		}
	}
}

// FuzzQuantize4Kernel compares the vector and scalar 4-bit quantizers on
// arbitrary float32 data, seeds and bucket sizes: the quantizer directly
// (scale max|x|) and whole Encode streams.
func FuzzQuantize4Kernel(f *testing.F) {
	seedData := make([]byte, 4*70)
	for i, v := range gradientLike(70, 8) {
		binary.LittleEndian.PutUint32(seedData[4*i:], math.Float32bits(v))
	}
	f.Add(seedData, uint64(1), uint16(0))
	f.Add(seedData[:4*33], uint64(0), uint16(16))
	f.Add(make([]byte, 4*40), uint64(7), uint16(32))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, bucket uint16) {
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		checkQuantize4(t, x, seed)
		if len(x) == 0 {
			return
		}
		opts := Options{BucketSize: int(bucket%2048) + 1, Seed: seed}
		run := func(p q4path) []byte {
			var out []byte
			withQuantize4Path(p, func() { out = encode(t, mustNew(t, Q4, opts), x) })
			return out
		}
		want := run(q4scalar)
		for _, p := range quantize4Paths() {
			if !bytes.Equal(run(p), want) {
				t.Fatalf("%s, bucket %d seed %d: streams differ", p.name, opts.BucketSize, seed)
			}
		}
	})
}

// unmix inverts SplitMix64's output function: mix(unmix(r)) = r, so a
// test can choose the random bits a given draw returns.
func unmix(r uint64) uint64 {
	unshift := func(y uint64, s uint) uint64 {
		x := y
		for range 64/s + 1 {
			x = y ^ x>>s
		}
		return x
	}
	inverse := func(c uint64) uint64 { // c odd: Newton's iteration mod 2^64
		inv := c
		for range 6 {
			inv *= 2 - c*inv
		}
		return inv
	}
	z := unshift(r, 31)
	z *= inverse(0x94d049bb133111eb)
	z = unshift(z, 27)
	z *= inverse(0xbf58476d1ce4e5b9)
	return unshift(z, 30)
}

func TestUnmix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		r := rng.Uint64()
		if _, got := splitmix64(unmix(r) - splitmixGamma); got != r {
			t.Fatalf("unmix(%#x): draw %#x", r, got)
		}
	}
}

// TestQuantize4KernelBoundaries picks, for one pair of each input, the
// random bits that put |x| invStep + r exactly on or one below a level
// boundary (by choosing the seed), so that a fixed-point value off by one
// in either half of the pair changes the code. Random data would almost
// never find such a difference: it matters with probability about 2^-32.
func TestQuantize4KernelBoundaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	c := &codec{kind: Q4}
	if err := c.initStochastic(Options{}); err != nil {
		t.Fatal(err)
	}
	inputs := []map[string][]float32{}
	for _, n := range []int{32, 33, 64, 200, 1024} {
		inputs = append(inputs, quantize4Inputs(n, rng))
	}
	for _, in := range inputs {
		for _, x := range in {
			scale, finite := bucketScale(c, x)
			if !finite || scale == 0 {
				continue
			}
			invStep := 7 / float64(scale) * 0x1p32
			fixed := func(v float32) uint64 {
				abs := float64(math.Float32frombits(math.Float32bits(v) & 0x7fffffff))
				return uint64(int64(float64(abs*invStep) + 0.5))
			}
			for range 20 {
				k := rng.IntN(len(x) / 2)
				if rng.IntN(4) == 0 {
					x[2*k+rng.IntN(2)] = scale // the clamp
				}
				dlo, dhi := uint64(rng.IntN(3))-1, uint64(rng.IntN(3))-1 // -1, 0, 1
				lo := uint32(dlo - fixed(x[2*k]))
				hi := uint32(dhi - fixed(x[2*k+1]))
				state := unmix(uint64(lo)|uint64(hi)<<32) - uint64(k+1)*splitmixGamma
				checkQuantize4(t, x, state)
			}
		}
	}
}
