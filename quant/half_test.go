package quant

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fp16Positive holds the values of all finite non-negative binary16 bit
// patterns 0x0000..0x7bff, increasing with the pattern; refFP16 searches it.
var fp16Positive = func() []float64 {
	v := make([]float64, 0x7c00)
	for h := range v {
		exp, mant := h>>10, h&0x3ff
		if exp == 0 {
			v[h] = math.Ldexp(float64(mant), -24)
		} else {
			v[h] = math.Ldexp(float64(0x400|mant), exp-25)
		}
	}
	return v
}()

// refFP16 is a slow reference for Float32ToFP16 written from the
// definition, independently of the bit tricks: find the two binary16
// neighbours of |f|, take the nearer, on a tie the one with the even
// pattern; 65520 (the tie between 65504 and 2^16) and above become Inf.
func refFP16(f float32) uint16 {
	x := float64(f)
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
	}
	x = math.Abs(x)
	switch {
	case math.IsNaN(x):
		return 0xffff // only compared as "is NaN"
	case x >= 65520:
		return sign | 0x7c00
	}
	hi := sort.SearchFloat64s(fp16Positive, x) // first pattern >= x
	if hi == len(fp16Positive) {
		return sign | 0x7bff // in (65504, 65520): nearer to 65504
	}
	if fp16Positive[hi] == x || hi == 0 {
		return sign | uint16(hi)
	}
	lo := hi - 1
	mid := (fp16Positive[lo] + fp16Positive[hi]) / 2 // exact in float64
	switch {
	case x < mid:
		return sign | uint16(lo)
	case x > mid:
		return sign | uint16(hi)
	case lo%2 == 0:
		return sign | uint16(lo)
	}
	return sign | uint16(hi)
}

// refBF16 is the same reference for bfloat16, whose neighbours are the
// truncated pattern and the next one.
func refBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	lo := uint16(bits >> 16)
	loVal := float64(math.Float32frombits(uint32(lo) << 16))
	hiVal := float64(math.Float32frombits(uint32(lo+1) << 16))
	if uint32(lo)<<16 == 0x7f7f0000 || uint32(lo)<<16 == 0xff7f0000 {
		// The pattern after the largest finite bfloat16 is Inf; the tie
		// point is the largest finite value plus half an ulp.
		hiVal = math.Copysign(math.Ldexp(1, 128), loVal)
	}
	x := float64(f)
	mid := (loVal + hiVal) / 2
	dx, dm := math.Abs(x), math.Abs(mid)
	switch {
	case dx < dm:
		return lo
	case dx > dm:
		return lo + 1
	case lo%2 == 0:
		return lo
	}
	return lo + 1
}

func isNaN32(f float32) bool { return f != f }

func isHalfNaN(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

func TestFP16AllPatternsRoundTrip(t *testing.T) {
	// Every binary16 value is a float32 value, so decode then encode must
	// give the pattern back, for all 65536 patterns (NaNs: still NaN, quiet).
	for h := 0; h <= 0xffff; h++ {
		f := FP16ToFloat32(uint16(h))
		back := Float32ToFP16(f)
		if isHalfNaN(uint16(h)) {
			require.True(t, isNaN32(f), "pattern %#04x", h)
			require.True(t, isHalfNaN(back), "pattern %#04x", h)
			require.NotZero(t, back&0x200, "NaN must come back quiet, pattern %#04x", h)
			require.Equal(t, uint16(h)&0x8000, back&0x8000, "NaN sign, pattern %#04x", h)
			continue
		}
		require.Equal(t, uint16(h), back, "pattern %#04x (%v)", h, f)
	}
}

func TestFP16MatchesReference(t *testing.T) {
	check := func(f float32) {
		t.Helper()
		got, want := Float32ToFP16(f), refFP16(f)
		if isNaN32(f) {
			require.True(t, isHalfNaN(got), "%v", f)
			return
		}
		require.Equal(t, want, got, "Float32ToFP16(%v) bits %#08x", f, math.Float32bits(f))
	}
	// Every float32 near every binary16 value and near every midpoint
	// between neighbours: the places where rounding decides.
	for h := 0; h < 0x7c00; h++ {
		for _, center := range []float32{float32(fp16Positive[h]), midpoint(h)} {
			for d := int32(-3); d <= 3; d++ {
				bits := int32(math.Float32bits(center)) + d
				if bits < 0 {
					continue
				}
				f := math.Float32frombits(uint32(bits))
				check(f)
				check(-f)
			}
		}
	}
	// Random bit patterns over the whole float32 range.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 18 {
		check(math.Float32frombits(rng.Uint32()))
	}
}

// midpoint returns the float32 halfway between binary16 patterns h and h+1
// (exact: it needs 12 significant bits), for h+1 up to Inf (65520).
func midpoint(h int) float32 {
	next := 65536.0
	if h+1 < len(fp16Positive) {
		next = fp16Positive[h+1]
	}
	return float32((fp16Positive[h] + next) / 2)
}

func TestFP16SpecialValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                            // largest finite
		{65519.996, 0x7bff},                        // just below the tie: stays finite
		{65520, 0x7c00},                            // the tie rounds to even: Inf
		{1e10, 0x7c00},                             // overflow to Inf, as the format does
		{-1e10, 0xfc00},                            //
		{math.MaxFloat32, 0x7c00},                  //
		{float32(math.Inf(1)), 0x7c00},             //
		{float32(math.Inf(-1)), 0xfc00},            //
		{0x1p-14, 0x0400},                          // smallest normal
		{0x1p-24, 0x0001},                          // smallest subnormal
		{0x1p-25, 0x0000},                          // tie between 0 and 2^-24: even is 0
		{0x1.8p-25, 0x0001},                        // above the tie
		{0x3p-25, 0x0002},                          // tie between 1 and 2 (x 2^-24): even is 2
		{-0x1p-26, 0x8000},                         // underflow keeps the sign
		{0x1p-149, 0x0000},                         // float32 subnormal
		{0x1.ffcp-15, 0x0400},                      // largest subnormal region value rounding up to normal
		{1 + 0x1p-11, 0x3c00},                      // tie at 1: even (1.0)
		{1 + 0x3p-11, 0x3c02},                      // tie between 1+2^-10 and 1+2^-9: even
		{float32(2049), 0x6800},                    // 2049 is a tie between 2048 and 2050
		{float32(2051), 0x6802},                    // tie between 2050 and 2052: 2052 (even)
		{math.Float32frombits(0x7fc00000), 0x7e00}, // quiet NaN
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Float32ToFP16(c.in), "Float32ToFP16(%v)", c.in)
	}
	// A signalling NaN comes out quiet, with its sign.
	snan := math.Float32frombits(0xff800001)
	h := Float32ToFP16(snan)
	assert.True(t, isHalfNaN(h))
	assert.Equal(t, uint16(0xfe00), h)
	assert.True(t, math.IsInf(float64(FP16ToFloat32(0x7c00)), 1))
	assert.True(t, math.IsInf(float64(FP16ToFloat32(0xfc00)), -1))
	assert.Equal(t, float32(0x1p-24), FP16ToFloat32(1))
	assert.True(t, math.Signbit(float64(FP16ToFloat32(0x8000))))
}

func TestBF16MatchesReference(t *testing.T) {
	check := func(f float32) {
		t.Helper()
		got := Float32ToBF16(f)
		if isNaN32(f) {
			back := BF16ToFloat32(got)
			require.True(t, isNaN32(back), "%v", f)
			require.NotZero(t, got&0x40, "NaN must be quiet")
			require.Equal(t, math.Float32bits(f)>>31, math.Float32bits(back)>>31, "NaN sign")
			return
		}
		require.Equal(t, refBF16(f), got, "Float32ToBF16(%v) bits %#08x", f, math.Float32bits(f))
	}
	// All 65536 patterns decode and re-encode to themselves (non-NaN), and
	// floats around every pattern and midpoint round as the reference says.
	for h := 0; h <= 0xffff; h++ {
		f := BF16ToFloat32(uint16(h))
		check(f)
		if !isNaN32(f) {
			require.Equal(t, uint16(h), Float32ToBF16(f))
		}
		for _, d := range []uint32{0x7fff, 0x8000, 0x8001, 1, 0xffff} {
			check(math.Float32frombits(uint32(h)<<16 | d))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1 << 18 {
		check(math.Float32frombits(rng.Uint32()))
	}
	assert.Equal(t, uint16(0x7f80), Float32ToBF16(math.MaxFloat32), "rounds past the largest bfloat16: Inf")
	assert.Equal(t, uint16(0x7f80), Float32ToBF16(float32(math.Inf(1))))
	assert.Equal(t, uint16(0x0002), Float32ToBF16(math.Float32frombits(0x00018000)), "subnormal tie: odd 0x0001 rounds up to even")
	assert.Equal(t, uint16(0x0002), Float32ToBF16(math.Float32frombits(0x00028000)), "subnormal tie: even 0x0002 stays")
}

// TestHalfRelativeError checks the documented error bounds for values in
// the normal range: rounding to nearest with p significant bits is off by at
// most half an ulp, 2^-p relative: 2^-11 for binary16 (p = 11), 2^-8 for
// bfloat16 (p = 8).
func TestHalfRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		// Log-uniform magnitudes over the binary16 normal range.
		x := float32(math.Copysign(math.Exp2(-14+rng.Float64()*29.9), rng.Float64()-0.5))
		fp := float64(FP16ToFloat32(Float32ToFP16(x)))
		bf := float64(BF16ToFloat32(Float32ToBF16(x)))
		require.LessOrEqual(t, math.Abs(fp-float64(x))/math.Abs(float64(x)), 0x1p-11, "fp16 of %v", x)
		require.LessOrEqual(t, math.Abs(bf-float64(x))/math.Abs(float64(x)), 0x1p-8, "bf16 of %v", x)
	}
}
