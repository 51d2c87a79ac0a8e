//go:build amd64 && !purego

package quant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// withScalarUnpack runs f with the vector unpack kernels switched off.
func withScalarUnpack(f func()) {
	saved := useUnpackAVX2
	useUnpackAVX2 = false
	defer func() { useUnpackAVX2 = saved }()
	f()
}

// TestUnpackGapsVecMatchesScalar compares unpackGaps with and without the
// AVX2 kernel on every width the kernel takes, block lengths around its
// groups of 8, blocks at odd byte offsets, streams that end right after
// the block (so the last groups fall back to the scalar loop), and
// running indices near 2^32, where the kernel's 32-bit lanes wrap.
func TestUnpackGapsVecMatchesScalar(t *testing.T) {
	if !useUnpackAVX2 {
		t.Skip("this CPU has no AVX2")
	}
	rng := NewRand(11)
	for width := uint(1); width <= maxVecWidth+1; width++ {
		for _, n := range []int{1, 7, 8, 9, 16, 17, 31, 64, 127, 128} {
			for _, off := range []int{0, 1, 3} {
				for _, extra := range []int{0, 1, 7, 8, 15, 16, 40} {
					for _, prev := range []uint64{0, 77, math.MaxUint32 - 300, math.MaxUint32} {
						src := make([]byte, off+(n*int(width)+7)/8+extra)
						for i := range src {
							src[i] = byte(rng.Uint64())
						}
						vec, scalar := make([]uint32, n), make([]uint32, n)
						p1, or1 := unpackGaps(vec, prev, src, off, width)
						var p2, or2 uint64
						withScalarUnpack(func() { p2, or2 = unpackGaps(scalar, prev, src, off, width) })
						where := []any{"width %d n %d off %d extra %d prev %d", width, n, off, extra, prev}
						require.Equal(t, scalar, vec, where...)
						require.Equal(t, []uint64{p2, or2}, []uint64{p1, or1}, where...)
					}
				}
			}
		}
	}
}

// TestUnpack4VecMatchesScalar decodes q4 streams of random values (every
// code, and a bucket of zeros) with and without the AVX2 kernel, in both
// set and add mode, on lengths around its steps of 8 values, and compares
// the bits.
func TestUnpack4VecMatchesScalar(t *testing.T) {
	if !useUnpackAVX2 {
		t.Skip("this CPU has no AVX2")
	}
	rng := NewRand(12)
	for _, bucket := range []int{8, 13, 1024} {
		c, err := New(Q4, Options{BucketSize: bucket, Seed: 3})
		require.NoError(t, err)
		for _, n := range []int{1, 7, 8, 9, 16, 23, 1000, 3000} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.Float64()-0.5) * 8
			}
			clear(x[:min(n, bucket)]) // the first bucket's scale is 0
			src, err := c.Encode(make([]byte, c.EncodedSize(n)), x)
			require.NoError(t, err)
			base := make([]float32, n)
			for i := range base {
				base[i] = float32(rng.Float64() - 0.5)
			}
			for _, add := range []bool{false, true} {
				vec, scalar := append([]float32(nil), base...), append([]float32(nil), base...)
				decode := c.Decode
				if add {
					decode = c.DecodeAdd
				}
				require.NoError(t, decode(vec, src))
				withScalarUnpack(func() { require.NoError(t, decode(scalar, src)) })
				for i := range vec {
					require.Equal(t, math.Float32bits(scalar[i]), math.Float32bits(vec[i]),
						"bucket %d n %d add %v value %d", bucket, n, add, i)
				}
			}
		}
	}
}

// BenchmarkUnpackPaths compares the vector and scalar unpack paths, side
// by side: a bit-packed index list of the shape ssar-split's allgather
// decodes (161000 indices in 2M, the union of 8 ranks' 1% supports in
// one eighth of 16M), and q4 values (BenchmarkDecode/q4's input).
func BenchmarkUnpackPaths(b *testing.B) {
	const n, dim = 161000, 1 << 21
	enc, err := EncodeIndices(make([]byte, MaxIndicesSize(n, IndexBitPack)), sparseIndices(n, dim, 3), IndexBitPack)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]uint32, n)
	c, err := New(Q4, Options{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	x := gradientLike(benchValues, 1)
	codes, err := c.Encode(make([]byte, c.EncodedSize(len(x))), x)
	if err != nil {
		b.Fatal(err)
	}
	for _, vec := range []bool{true, false} {
		path := map[bool]string{true: "avx2", false: "scalar"}[vec]
		run := func(name string, bytes int, f func() error) {
			b.Run(name+"/"+path, func(b *testing.B) {
				saved := useUnpackAVX2
				useUnpackAVX2 = useUnpackAVX2 && vec
				defer func() { useUnpackAVX2 = saved }()
				t := startCPU(b, int64(bytes))
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				t.stop()
			})
		}
		run("indices", 4*n, func() error { _, err := DecodeIndices(out, enc, dim); return err })
		run("q4", 4*len(x), func() error { return c.Decode(x, codes) })
	}
}
