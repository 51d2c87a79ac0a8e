package quant

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKindNames(t *testing.T) {
	names := map[Kind]string{None: "none", FP16: "fp16", BF16: "bf16", Q8: "q8", Q4: "q4", Q2: "q2"}
	require.Len(t, Kinds(), len(names))
	for _, k := range Kinds() {
		assert.Equal(t, names[k], k.String())
		parsed, err := ParseKind(k.String())
		require.NoError(t, err)
		assert.Equal(t, k, parsed)
		assert.True(t, k.Valid())
		c, err := New(k, Options{})
		require.NoError(t, err)
		assert.Equal(t, k, c.Kind())
	}
	k, err := ParseKind(" FP16 ")
	require.NoError(t, err)
	assert.Equal(t, FP16, k)
	_, err = ParseKind("q3")
	assert.ErrorContains(t, err, "none, fp16, bf16, q8, q4, q2")
	assert.Equal(t, "kind(9)", Kind(9).String())
	assert.False(t, Kind(9).Valid())
	assert.Zero(t, Kind(9).Bits())
}

func TestKindProperties(t *testing.T) {
	bits := map[Kind]int{None: 32, FP16: 16, BF16: 16, Q8: 8, Q4: 4, Q2: 2}
	for k, b := range bits {
		assert.Equal(t, b, k.Bits(), "%s", k)
		assert.Equal(t, k == None, k.Lossless(), "%s", k)
		assert.Equal(t, b <= 8, k.Stochastic(), "%s", k)
	}
	assert.Equal(t, "maxabs", ScaleMaxAbs.String())
	assert.Equal(t, "l2", ScaleL2.String())
	assert.Equal(t, "scalemode(5)", ScaleMode(5).String())
	assert.Equal(t, "bitpack", IndexBitPack.String())
	assert.Equal(t, "varint", IndexVarint.String())
	assert.Equal(t, "auto", IndexAuto.String())
	assert.Equal(t, "indexmethod(7)", IndexMethod(7).String())
}

// TestLosslessAndHalfRoundTrip: None is exact; fp16 and bf16 decode to the
// nearest representable value (checked against the scalar conversions).
func TestLosslessAndHalfRoundTrip(t *testing.T) {
	x := testVector(1001, 31)
	x[3] = float32(65536)
	for _, kind := range []Kind{None, FP16, BF16} {
		c := mustNew(t, kind, Options{})
		got := decode(t, c, encode(t, c, x), len(x))
		for i, v := range x {
			want := v
			switch kind {
			case FP16:
				want = FP16ToFloat32(Float32ToFP16(v))
			case BF16:
				want = BF16ToFloat32(Float32ToBF16(v))
			}
			require.Equal(t, want, got[i], "%s index %d", kind, i)
		}
		err := c.Decode(make([]float32, len(x)+1), encode(t, c, x))
		assert.ErrorIs(t, err, ErrCorrupt, "%s length mismatch", kind)
		err = c.DecodeAdd(make([]float32, len(x)-1), encode(t, c, x))
		assert.ErrorIs(t, err, ErrCorrupt, "%s length mismatch", kind)
	}
}

// TestBucketSize checks BucketSize against the stream layout: a stochastic
// stream of BucketSize values is one bucket (one scale), one value more
// starts a second.
func TestBucketSize(t *testing.T) {
	for _, k := range Kinds() {
		for _, bucket := range []int{0, 1, 7, 1000, MaxBucketSize} {
			c, err := New(k, Options{BucketSize: bucket})
			require.NoError(t, err)
			if !k.Stochastic() {
				assert.Zero(t, c.BucketSize(), "%s", k)
				continue
			}
			want := bucket
			if want == 0 {
				want = DefaultBucketSize
			}
			require.Equal(t, want, c.BucketSize(), "%s bucket %d", k, bucket)
			one := 4 + (want*k.Bits()+7)/8
			assert.Equal(t, one, c.EncodedSize(want), "%s bucket %d", k, bucket)
			assert.Equal(t, one+4+(k.Bits()+7)/8, c.EncodedSize(want+1), "%s bucket %d", k, bucket)
		}
	}
}
