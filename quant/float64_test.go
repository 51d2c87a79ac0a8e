package quant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFloat64MatchesFloat32: float64 input is rounded to float32 and then
// encoded as float32 input would be, so the streams are byte-identical
// (same seed), and the float64 decoders widen the float32 results.
func TestFloat64MatchesFloat32(t *testing.T) {
	x32 := testVector(2100, 41)
	x64 := make([]float64, len(x32))
	for i, v := range x32 {
		// Extra float64 digits below float32 precision: rounded away.
		x64[i] = float64(v) * (1 + 0x1p-40)
	}
	base := testVector(2100, 42)
	for _, kind := range Kinds() {
		opts := Options{Seed: 9, BucketSize: 500}
		c32, c64 := mustNew(t, kind, opts), mustNew(t, kind, opts)
		enc32 := encode(t, c32, x32)
		enc64, err := c64.Encode64(make([]byte, c64.EncodedSize(len(x64))), x64)
		require.NoError(t, err)
		require.Equal(t, enc32, enc64, "%s", kind)

		dec32 := decode(t, c32, enc32, len(x32))
		dec64 := make([]float64, len(x64))
		require.NoError(t, c64.Decode64(dec64, enc64))
		sum64 := make([]float64, len(x64))
		for i := range sum64 {
			sum64[i] = float64(base[i])
		}
		require.NoError(t, c64.DecodeAdd64(sum64, enc64))
		for i := range dec32 {
			require.Equal(t, float64(dec32[i]), dec64[i], "%s index %d", kind, i)
			require.Equal(t, float64(base[i])+float64(dec32[i]), sum64[i], "%s index %d", kind, i)
		}

		_, err = c64.Encode64(make([]byte, 3), x64)
		assert.ErrorIs(t, err, ErrShortBuffer)
		assert.ErrorIs(t, c64.Decode64(make([]float64, len(x64)/2), enc64), ErrCorrupt)
	}
}

// TestFloat64OutOfFloat32Range: a float64 beyond float32's range rounds to
// Inf, and is then treated as any Inf.
func TestFloat64OutOfFloat32Range(t *testing.T) {
	x := []float64{1, 1e300, 2}
	c := mustNew(t, Q8, Options{NonFinite: NonFiniteReject})
	_, err := c.Encode64(make([]byte, c.EncodedSize(len(x))), x)
	var nf *NonFiniteError
	require.ErrorAs(t, err, &nf)
	assert.Equal(t, 1, nf.Index)

	fp := mustNew(t, FP16, Options{})
	enc, err := fp.Encode64(make([]byte, 6), x)
	require.NoError(t, err)
	out := make([]float64, 3)
	require.NoError(t, fp.Decode64(out, enc))
	assert.Equal(t, []float64{1, math.Inf(1), 2}, out)
}
