package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var stochasticKinds = []Kind{Q8, Q4, Q2}

func mustNew(t testing.TB, kind Kind, opts Options) Codec {
	t.Helper()
	c, err := New(kind, opts)
	require.NoError(t, err)
	return c
}

func encode(t testing.TB, c Codec, x []float32) []byte {
	t.Helper()
	out, err := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
	require.NoError(t, err)
	return out
}

func decode(t testing.TB, c Codec, enc []byte, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	require.NoError(t, c.Decode(out, enc))
	return out
}

// levelsOf returns s for a stochastic kind.
func levelsOf(kind Kind) float64 { return float64(int(1)<<(kind.Bits()-1) - 1) }

// refScale computes a bucket's scale from the definition.
func refScale(x []float32, mode ScaleMode) float64 {
	var maxAbs, sum float64
	for _, v := range x {
		maxAbs = max(maxAbs, math.Abs(float64(v)))
		sum += float64(v) * float64(v)
	}
	if mode == ScaleL2 {
		return float64(float32(math.Sqrt(sum)))
	}
	return maxAbs
}

// testVector is a fixed random vector with some exact zeros and a few
// values spanning orders of magnitude.
func testVector(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		switch i % 17 {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(rng.NormFloat64() * 1e-3)
		default:
			x[i] = float32(rng.NormFloat64())
		}
	}
	return x
}

// TestStochasticUnbiasedAndVariance encodes one fixed vector many times
// with independent randomness and checks, per coordinate, that the mean of
// the decodings converges to x (unbiasedness), and that the mean squared
// error matches the variance stochastic rounding must have and stays under
// the analytic bounds.
//
// Bounds. Coordinate i of bucket b has step h = scale_b/s; with
// a = |x_i|/h and p = a - floor(a), its decoding is sign*floor(a)*h with
// probability 1-p and sign*(floor(a)+1)*h with probability p, so
//   - it lies in an interval of width h: by Hoeffding, the mean of T
//     independent decodings deviates from E by t or more with probability
//     at most 2 exp(-2 T t^2 / h^2). With t = h sqrt(ln(2N/delta)/(2T)) the
//     chance that any of the N coordinates fails is at most delta (union
//     bound). We take delta = 1e-6; the seeds are fixed, so the test is
//     deterministic, and a quantizer biased by more than t (rounding to
//     nearest would be off by up to h/2 >> t) fails it.
//   - its squared error is p^2 h^2 or (1-p)^2 h^2, with mean
//     v_i = h^2 p (1-p) <= h^2/4. The sum over all T*N terms deviates from
//     T*V (V = sum v_i) by u with probability at most 2 exp(-2u^2/(T R)),
//     R = sum r_i^2, r_i = h^2 |1-2p| the range of the term; so the mean
//     per trial is within sqrt(ln(2/delta) R / (2T)) of V.
//   - A bias of a few percent of a step hides under t per coordinate, but
//     not in aggregate: the error of each decoding, divided by h and
//     multiplied by sign(x_i), lies in an interval of width 1, so the mean
//     of those T*N terms is within sqrt(ln(2/delta)/(2TN)) of its
//     expectation, 0 for an unbiased quantizer (about 0.0012 here).
//   - Analytic bounds on V: max-abs scale, V <= sum_b m_b scale_b^2/(4 s^2)
//     (from v_i <= h^2/4); L2 scale, QSGD's Lemma 3.1,
//     V <= sum_b min(m_b/s^2, sqrt(m_b)/s) ||x_b||^2.
//
// Decoded levels are rounded once to float32, so every decoding may also
// be off by 2^-24 relative; the bounds get that slack.
func TestStochasticUnbiasedAndVariance(t *testing.T) {
	const (
		trials     = 2000
		n          = 2*DefaultBucketSize + 452 // two full buckets and a partial one
		delta      = 1e-6
		float32Rel = 0x1p-24
	)
	x := testVector(n, 11)
	for _, mode := range []ScaleMode{ScaleMaxAbs, ScaleL2} {
		for _, kind := range stochasticKinds {
			t.Run(kind.String()+"/"+mode.String(), func(t *testing.T) {
				c := mustNew(t, kind, Options{Scale: mode, Seed: 42})
				s := levelsOf(kind)
				step := make([]float64, n)
				var wantVar, rangeSq, bound float64
				for start := 0; start < n; start += DefaultBucketSize {
					bucket := x[start:min(start+DefaultBucketSize, n)]
					scale := refScale(bucket, mode)
					m := float64(len(bucket))
					if mode == ScaleMaxAbs {
						bound += m * scale * scale / (4 * s * s)
					} else {
						bound += min(m/(s*s), math.Sqrt(m)/s) * scale * scale
					}
					for i := range bucket {
						h := scale / s
						a := math.Abs(float64(bucket[i])) / h
						p := a - math.Floor(a)
						step[start+i] = h
						wantVar += h * h * p * (1 - p)
						rangeSq += math.Pow(h*h*math.Abs(1-2*p), 2)
					}
				}
				require.LessOrEqual(t, wantVar, bound, "the variance stochastic rounding has must satisfy the analytic bound")

				sum := make([]float64, n)
				var sqErr, signedErr float64
				enc := make([]byte, c.EncodedSize(n))
				dec := make([]float32, n)
				for range trials {
					_, err := c.Encode(enc, x)
					require.NoError(t, err)
					require.NoError(t, c.Decode(dec, enc))
					for i, d := range dec {
						sum[i] += float64(d)
						e := float64(d) - float64(x[i])
						sqErr += e * e
						switch {
						case x[i] > 0:
							signedErr += e / step[i]
						case x[i] < 0:
							signedErr -= e / step[i]
						}
					}
				}
				meanTol := math.Sqrt(math.Log(2*n/delta) / (2 * trials))
				for i := range x {
					tol := step[i]*meanTol + 2*float32Rel*step[i]*s
					require.InDelta(t, float64(x[i]), sum[i]/trials, tol, "coordinate %d", i)
				}
				aggTol := math.Sqrt(math.Log(2/delta)/(2*trials*n)) + 2*float32Rel*s
				assert.InDelta(t, 0, signedErr/(trials*n), aggTol, "mean error in steps, signed by x")
				varTol := math.Sqrt(math.Log(2/delta)*rangeSq/(2*trials)) + 4*float32Rel*bound
				assert.InDelta(t, wantVar, sqErr/trials, varTol, "mean squared error vs its expectation")
				assert.LessOrEqual(t, sqErr/trials, bound+varTol)
			})
		}
	}
}

// TestStochasticEncodedSize checks sizes against the layout: per bucket a
// 4-byte scale and ceil(m*b/8) code bytes.
func TestStochasticEncodedSize(t *testing.T) {
	for _, kind := range stochasticKinds {
		for _, bucket := range []int{1, 3, 7, 8, 64, 1000, 1024} {
			c := mustNew(t, kind, Options{BucketSize: bucket})
			for _, n := range []int{0, 1, 2, 3, 5, 7, 8, 9, 31, 32, 33, 63, 64, 65, 999, 1000, 1001, 1024, 1025, 3000} {
				want := 0
				for start := 0; start < n; start += bucket {
					m := min(bucket, n-start)
					want += 4 + (m*kind.Bits()+7)/8
				}
				require.Equal(t, want, c.EncodedSize(n), "%s bucket %d n %d", kind, bucket, n)
				x := testVector(n, uint64(n))
				require.Len(t, encode(t, c, x), want)
			}
			assert.Zero(t, c.EncodedSize(-5))
		}
	}
}

// TestCompressionRatio checks that bytes fall by the expected factor
// against float32: 32 bits per value become b bits plus a 32-bit scale per
// bucket of B, a ratio of 32/(b + 32/B): 3.98 for q8, 7.94 for q4, 15.75
// for q2 at B = 1024; exactly 2 for fp16 and bf16.
func TestCompressionRatio(t *testing.T) {
	const n = 1 << 20
	for _, kind := range Kinds() {
		c := mustNew(t, kind, Options{})
		ratio := float64(4*n) / float64(c.EncodedSize(n))
		want := 32 / float64(kind.Bits())
		if kind.Stochastic() {
			want = 32 / (float64(kind.Bits()) + 32.0/DefaultBucketSize)
		}
		assert.InDelta(t, want, ratio, 1e-9, "%s", kind)
	}
}

func TestQ2IsTernary(t *testing.T) {
	x := testVector(3000, 5)
	c := mustNew(t, Q2, Options{Seed: 9})
	got := decode(t, c, encode(t, c, x), len(x))
	for start := 0; start < len(x); start += DefaultBucketSize {
		end := min(start+DefaultBucketSize, len(x))
		scale := float32(refScale(x[start:end], ScaleMaxAbs))
		for i := start; i < end; i++ {
			require.Contains(t, []float32{-scale, 0, scale}, got[i], "index %d", i)
		}
	}
}

// TestMaxAbsValueExact: with the max-abs scale the largest value sits on
// the top level, so it is reproduced exactly, whatever the randomness.
func TestMaxAbsValueExact(t *testing.T) {
	x := testVector(1024, 13)
	x[77] = -7.25
	for _, kind := range stochasticKinds {
		c := mustNew(t, kind, Options{Seed: 1})
		for range 20 {
			assert.Equal(t, float32(-7.25), decode(t, c, encode(t, c, x), len(x))[77], "%s", kind)
		}
	}
}

func TestStochasticDeterministicSeed(t *testing.T) {
	x := testVector(5000, 3)
	for _, kind := range stochasticKinds {
		a := encode(t, mustNew(t, kind, Options{Seed: 7}), x)
		b := encode(t, mustNew(t, kind, Options{Seed: 7}), x)
		other := encode(t, mustNew(t, kind, Options{Seed: 8}), x)
		assert.Equal(t, a, b, "%s: same seed, same bytes", kind)
		assert.NotEqual(t, a, other, "%s: other seed, other bytes", kind)
	}
}

// TestZeroBucket: an all-zero bucket encodes to zero bytes, decodes to
// zeros, and consumes no random numbers (the next bucket's bytes equal
// those of a fresh codec with the same seed).
func TestZeroBucket(t *testing.T) {
	x := testVector(2048, 4)
	clear(x[:1024])
	for _, kind := range stochasticKinds {
		c := mustNew(t, kind, Options{Seed: 3})
		enc := encode(t, c, x)
		half := c.EncodedSize(1024)
		assert.True(t, allZero(enc[:half]), "%s", kind)
		fresh := encode(t, mustNew(t, kind, Options{Seed: 3}), x[1024:])
		assert.Equal(t, fresh, enc[half:], "%s", kind)
		got := decode(t, c, enc, len(x))
		for _, v := range got[:1024] {
			require.Zero(t, math.Float32bits(v))
		}
	}
}

// TestTinyAndHugeScales: subnormal and near-overflow buckets stay finite
// and within [-scale, scale] (the per-bucket math is done in float64).
func TestTinyAndHugeScales(t *testing.T) {
	for _, mode := range []ScaleMode{ScaleMaxAbs, ScaleL2} {
		for _, mag := range []float32{0x1p-149, 3e-45, 1e-40, 1e-30, 3e38, math.MaxFloat32} {
			x := []float32{mag, -mag, mag / 2, 0, -mag / 3, mag}
			for _, kind := range stochasticKinds {
				c := mustNew(t, kind, Options{Seed: 1, Scale: mode})
				got := decode(t, c, encode(t, c, x), len(x))
				scale := refScale(x, mode)
				for i, v := range got {
					require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "%s %s %g[%d] -> %v", kind, mode, mag, i, v)
					require.LessOrEqual(t, math.Abs(float64(v)), scale, "%s %s %g[%d]", kind, mode, mag, i)
				}
				if mode == ScaleMaxAbs {
					assert.Equal(t, mag, got[0], "the largest value sits on the top level: exact")
				}
			}
		}
	}
}

func TestNonFinitePoison(t *testing.T) {
	const bucket = 16
	x := testVector(5*bucket, 8)
	x[5] = float32(math.NaN())
	x[bucket+3] = float32(math.Inf(1))
	x[2*bucket+15] = float32(math.Inf(-1))
	for _, kind := range stochasticKinds {
		c := mustNew(t, kind, Options{BucketSize: bucket, Seed: 2})
		got := decode(t, c, encode(t, c, x), len(x))
		for i, v := range got {
			if i < 3*bucket {
				require.True(t, math.IsNaN(float64(v)), "%s index %d in a poisoned bucket", kind, i)
			} else {
				require.False(t, math.IsNaN(float64(v)), "%s index %d", kind, i)
			}
		}
		// DecodeAdd spreads the NaN into the sum, like a float32 reduction.
		sum := make([]float32, len(x))
		require.NoError(t, c.DecodeAdd(sum, encode(t, c, x)))
		assert.True(t, math.IsNaN(float64(sum[0])))
	}
}

func TestNonFiniteReject(t *testing.T) {
	const bucket = 16
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := testVector(4*bucket, 8)
		x[2*bucket+9] = bad
		x[3*bucket+1] = float32(math.NaN())
		for _, kind := range stochasticKinds {
			c := mustNew(t, kind, Options{BucketSize: bucket, NonFinite: NonFiniteReject})
			_, err := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
			var nf *NonFiniteError
			require.ErrorAs(t, err, &nf, "%s %v", kind, bad)
			assert.Equal(t, 2*bucket+9, nf.Index)
			assert.Equal(t, math.Float32bits(bad), math.Float32bits(nf.Value))
			assert.Contains(t, err.Error(), "index 41")
		}
	}
}

// TestDecodeAddMatchesDecode: the fused DecodeAdd gives bit-for-bit the
// same result as Decode into scratch and an add, for every kind.
func TestDecodeAddMatchesDecode(t *testing.T) {
	x := testVector(3001, 21)
	base := testVector(3001, 22)
	base[0] = float32(math.Copysign(0, -1))
	for _, kind := range Kinds() {
		c := mustNew(t, kind, Options{Seed: 5, BucketSize: 100})
		enc := encode(t, c, x)
		want := decode(t, c, enc, len(x))
		for i := range want {
			want[i] += base[i]
		}
		got := append([]float32(nil), base...)
		require.NoError(t, c.DecodeAdd(got, enc))
		for i := range got {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s index %d", kind, i)
		}
	}
}

func TestEncodeShortBuffer(t *testing.T) {
	x := testVector(100, 1)
	for _, kind := range Kinds() {
		c := mustNew(t, kind, Options{})
		_, err := c.Encode(make([]byte, c.EncodedSize(len(x))-1), x)
		require.ErrorIs(t, err, ErrShortBuffer, "%s", kind)
		// A longer buffer is fine and the result aliases it.
		buf := make([]byte, 0, c.EncodedSize(len(x))+10)
		out, err := c.Encode(buf, x)
		require.NoError(t, err)
		assert.Len(t, out, c.EncodedSize(len(x)))
		assert.Same(t, &buf[:1][0], &out[0])
	}
}

func TestStochasticDecodeRejects(t *testing.T) {
	const bucket = 10 // q4: 5 code bytes per full bucket; q2: 3 bytes, 4 padding bits
	x := testVector(2*bucket-3, 6)
	for _, kind := range stochasticKinds {
		c := mustNew(t, kind, Options{BucketSize: bucket, Seed: 1})
		good := encode(t, c, x)
		corrupt := func(name string, mutate func(b []byte) []byte) {
			t.Helper()
			b := mutate(append([]byte(nil), good...))
			dst := testVector(len(x), 99)
			before := append([]float32(nil), dst...)
			err := c.Decode(dst, b)
			assert.ErrorIs(t, err, ErrCorrupt, "%s: %s", kind, name)
			err = c.DecodeAdd(dst, b)
			assert.ErrorIs(t, err, ErrCorrupt, "%s: %s (add)", kind, name)
			assert.Equal(t, before, dst, "%s: %s: a rejected stream leaves dst untouched", kind, name)
		}
		setScale := func(bits uint32) func(b []byte) []byte {
			return func(b []byte) []byte {
				b[0], b[1], b[2], b[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
				return b
			}
		}
		corrupt("short", func(b []byte) []byte { return b[:len(b)-1] })
		corrupt("long", func(b []byte) []byte { return append(b, 0) })
		corrupt("negative scale", setScale(0xbf800000))
		corrupt("negative zero scale", setScale(0x80000000))
		corrupt("infinite scale", setScale(0x7f800000))
		corrupt("negative scale in the second bucket", func(b []byte) []byte {
			second := c.EncodedSize(bucket)
			b[second+3] |= 0x80
			return b
		})
		corrupt("zero scale, nonzero codes", func(b []byte) []byte {
			setScale(0)(b)
			b[4] |= 1
			return b
		})
		corrupt("NaN scale, nonzero codes", func(b []byte) []byte {
			setScale(quietNaN)(b)
			b[4] |= 1
			return b
		})
		if used := ((2*bucket - 3 - bucket) * kind.Bits()) % 8; used != 0 {
			corrupt("padding bits", func(b []byte) []byte {
				b[len(b)-1] |= 0x80
				return b
			})
		}
		require.NoError(t, c.Decode(make([]float32, len(x)), good))
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, opts := range []Options{
		{BucketSize: -1},
		{BucketSize: MaxBucketSize + 1},
		{Scale: 7},
		{NonFinite: 9},
	} {
		_, err := New(Q4, opts)
		assert.Error(t, err, "%+v", opts)
	}
	_, err := New(Kind(42), Options{})
	assert.Error(t, err)
}

func TestRandDistinctStreams(t *testing.T) {
	// Not a quality test (SplitMix64 is well studied); checks the wiring:
	// seeds matter, Seed resets, Float64 is in [0, 1).
	a, b := NewRand(1), NewRand(2)
	assert.NotEqual(t, a.Uint64(), b.Uint64())
	a.Seed(2)
	b.Seed(2)
	for range 1000 {
		require.Equal(t, a.Uint64(), b.Uint64())
		f := a.Float64()
		b.Float64()
		require.True(t, f >= 0 && f < 1)
	}
	var ones int
	r := NewRand(0)
	for range 1000 {
		ones += popcount(r.Uint64())
	}
	// 64000 fair bits: mean 32000, sd sqrt(64000/4) = 126.5; 6 sd.
	assert.InDelta(t, 32000, ones, 6*126.5)
}

func popcount(v uint64) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// TestConcurrentDecode: decoders read no codec state, so one codec may
// decode from many goroutines at once (run under -race to check).
func TestConcurrentDecode(t *testing.T) {
	x := testVector(5000, 17)
	for _, kind := range Kinds() {
		c := mustNew(t, kind, Options{Seed: 1})
		enc := encode(t, c, x)
		want := decode(t, c, enc, len(x))
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				out := make([]float32, len(x))
				err := c.Decode(out, enc)
				if err == nil && !slices.Equal(out, want) {
					err = errors.New("concurrent decode differs")
				}
				errs <- err
			}()
		}
		for range 4 {
			require.NoError(t, <-errs, "%s", kind)
		}
	}
}

// TestQuantize4MatchesWords checks the 4-bit quantizer against the
// generic word-at-a-time one: the same random draws for the same values,
// so the same codes, on every length from 0 to 70 and a full bucket.
func TestQuantize4MatchesWords(t *testing.T) {
	c := &codec{kind: Q4}
	require.NoError(t, c.initStochastic(Options{Seed: 9}))
	x := gradientLike(1024, 4)
	var maxAbs float64
	for _, v := range x {
		maxAbs = max(maxAbs, math.Abs(float64(v)))
	}
	// The step of the bucket's own scale, so that the codes spread over
	// every level (and past it, clamped, for the 10% too large step).
	invStep := 7 / maxAbs * 1.1 * 0x1p32
	lengths := []int{1024}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		v := x[:n]
		size := (n*4 + 7) / 8
		a, b := make([]byte, size), make([]byte, size)
		c.rng.state = 77
		quantize4(c, a, v, invStep)
		s1 := c.rng.state
		c.rng.state = 77
		quantizeWords(c, b, v, invStep)
		require.Equal(t, b, a, "length %d", n)
		require.Equal(t, c.rng.state, s1, "length %d: draws", n)
	}
}
