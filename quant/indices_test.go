package quant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var indexMethods = []IndexMethod{IndexVarint, IndexBitPack, IndexAuto}

func indexCases() map[string][]uint32 {
	run := make([]uint32, 1000)
	for i := range run {
		run[i] = uint32(5000 + i)
	}
	mixed := append(append([]uint32{}, run[:300]...), 1e6, 1e6+1, 3e9, math.MaxUint32)
	return map[string][]uint32{
		"empty":        {},
		"zero":         {0},
		"max":          {math.MaxUint32},
		"two extremes": {0, math.MaxUint32},
		"run":          run,
		"mixed":        mixed,
		"sparse":       sparseIndices(5000, 1<<24, 1),
		"dense":        sparseIndices(5000, 6000, 2),
		"block edge":   sparseIndices(1+2*IndexBlockSize, 1<<20, 3),
		"block edge+1": sparseIndices(2+2*IndexBlockSize, 1<<20, 4),
	}
}

func TestIndicesRoundTrip(t *testing.T) {
	for name, idx := range indexCases() {
		for _, m := range indexMethods {
			size, err := IndicesSize(idx, m)
			require.NoError(t, err)
			require.LessOrEqual(t, size, MaxIndicesSize(len(idx), m), "%s %s", name, m)
			enc, err := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), idx, m)
			require.NoError(t, err, "%s %s", name, m)
			require.Len(t, enc, size, "%s %s: IndicesSize is exact", name, m)
			count, err := DecodedIndexCount(enc)
			require.NoError(t, err)
			require.Equal(t, len(idx), count)
			got, err := DecodeIndices(make([]uint32, len(idx)), enc, 0)
			require.NoError(t, err, "%s %s", name, m)
			require.Equal(t, idx, got, "%s %s", name, m)
		}
	}
}

func TestIndicesAutoPicksSmaller(t *testing.T) {
	for name, idx := range indexCases() {
		v, _ := IndicesSize(idx, IndexVarint)
		b, _ := IndicesSize(idx, IndexBitPack)
		a, _ := IndicesSize(idx, IndexAuto)
		assert.Equal(t, min(v, b), a, name)
	}
}

// TestIndicesSizes pins the layout: a run of n consecutive indices costs
// the header plus one width byte per block in bitpack and one byte per gap
// in varint; random indices with mean gap g cost about log2(g) bits each.
func TestIndicesSizes(t *testing.T) {
	run := indexCases()["run"] // 1000 indices from 5000: count 2 bytes, first 2 bytes
	v, _ := IndicesSize(run, IndexVarint)
	b, _ := IndicesSize(run, IndexBitPack)
	assert.Equal(t, 1+2+2+999, v)
	assert.Equal(t, 1+2+2+(999+IndexBlockSize-1)/IndexBlockSize, b)

	// Uniform over 2^24 with 5000 indices: mean gap 3355, so gaps need
	// about 12 bits; widths are set by the block maximum, about 14-15 bits.
	// That must beat 4 bytes per raw uint32 by well over 2x.
	sparse := indexCases()["sparse"]
	b, _ = IndicesSize(sparse, IndexBitPack)
	v, _ = IndicesSize(sparse, IndexVarint)
	assert.Less(t, float64(b)/5000, 2.0)
	assert.Less(t, float64(v)/5000, 2.1)
}

func TestEncodeIndicesRejects(t *testing.T) {
	for _, m := range indexMethods {
		_, err := EncodeIndices(make([]byte, 100), []uint32{1, 3, 3}, m)
		assert.ErrorContains(t, err, "position 2", "%s", m)
		_, err = EncodeIndices(make([]byte, 100), []uint32{5, 4}, m)
		assert.Error(t, err)
		_, err = EncodeIndices(make([]byte, 2), []uint32{1, 300, 70000}, m)
		assert.ErrorIs(t, err, ErrShortBuffer)
		_, err = IndicesSize([]uint32{2, 1}, m)
		assert.Error(t, err)
	}
	_, err := EncodeIndices(make([]byte, 100), []uint32{1}, IndexMethod(9))
	assert.Error(t, err)
	assert.Zero(t, MaxIndicesSize(-1, IndexVarint))
	assert.Zero(t, MaxIndicesSize(1, IndexMethod(9)))
}

func TestDecodeIndicesRejects(t *testing.T) {
	cases := map[string][]byte{
		"empty":                {},
		"bad method":           {0, 0},
		"method 3":             {3, 0},
		"truncated count":      {1, 0x80},
		"over-long count":      {1, 0x80, 0x00},
		"count overflows":      {1, 0xff, 0xff, 0xff, 0xff, 0x1f},
		"6-byte varint":        {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
		"missing first":        {1, 1},
		"count lies (varint)":  {1, 10, 0, 0},
		"count lies (bitpack)": {2, 0xff, 0x01, 0, 0}, // 255 indices, 1 block byte: at most 129
		"trailing byte":        {1, 1, 5, 0},
		"empty with trailer":   {1, 0, 0},
		"index past uint32":    {1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
		"gap varint overflow":  {1, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x10},
		"width 33":             {2, 2, 0, 33, 0, 0, 0, 0, 0},
		"non-minimal width":    {2, 2, 0, 2, 1},
		"padding bits":         {2, 2, 0, 1, 0x03},
		"truncated block":      {2, 3, 0, 2},
		"missing block":        {2, 3, 0},
		"over-long gap":        {1, 2, 0, 0x81, 0x00},
	}
	for name, src := range cases {
		_, err := DecodeIndices(make([]uint32, 300), src, 0)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
	// Valid streams, to be sure the cases above fail for the stated reason.
	for _, src := range [][]byte{{1, 0}, {1, 2, 0, 0}, {2, 2, 0, 1, 0x01}, {2, 2, 0, 0}, {2, 3, 0, 2, 9}} {
		_, err := DecodeIndices(make([]uint32, 300), src, 0)
		assert.NoError(t, err, "%v", src)
	}
}

func TestDecodeIndicesBounds(t *testing.T) {
	enc, err := EncodeIndices(make([]byte, 64), []uint32{3, 9, 99}, IndexVarint)
	require.NoError(t, err)
	_, err = DecodeIndices(make([]uint32, 3), enc, 100)
	assert.NoError(t, err)
	_, err = DecodeIndices(make([]uint32, 3), enc, 99)
	assert.ErrorIs(t, err, ErrCorrupt, "index 99 is not below dim 99")
	_, err = DecodeIndices(make([]uint32, 3), enc, 3)
	assert.ErrorIs(t, err, ErrCorrupt, "the first index is checked too")
	_, err = DecodeIndices(make([]uint32, 2), enc, 0)
	assert.ErrorIs(t, err, ErrShortBuffer, "no room: an error, never an allocation")
	got, err := DecodeIndices(make([]uint32, 0, 3), enc, 0)
	assert.NoError(t, err, "capacity is what counts")
	assert.Equal(t, []uint32{3, 9, 99}, got)
}

// TestIndicesFromAndOffset checks the rebasing entry points against the
// plain ones on a rebased copy: EncodeIndicesFrom(idx, base) must give
// the bytes of EncodeIndices(idx - base), and DecodeIndicesOffset must
// give DecodeIndices plus the offset, with the bound applied before it.
func TestIndicesFromAndOffset(t *testing.T) {
	for name, idx := range indexCases() {
		if len(idx) == 0 || idx[0] < 3 {
			continue
		}
		base := idx[0] - 3
		rebased := make([]uint32, len(idx))
		for i, x := range idx {
			rebased[i] = x - base
		}
		for _, m := range indexMethods {
			want, err := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), rebased, m)
			require.NoError(t, err)
			got, err := EncodeIndicesFrom(make([]byte, MaxIndicesSize(len(idx), m)), idx, base, m)
			require.NoError(t, err, "%s %s", name, m)
			require.Equal(t, want, got, "%s %s", name, m)

			dim := int(rebased[len(rebased)-1]) + 1
			const offset = 1000
			if uint64(dim)+offset > math.MaxUint32+1 {
				continue
			}
			dec, err := DecodeIndicesOffset(make([]uint32, len(idx)), got, dim, offset)
			require.NoError(t, err, "%s %s", name, m)
			for i := range dec {
				require.Equal(t, rebased[i]+offset, dec[i], "%s %s position %d", name, m, i)
			}
			_, err = DecodeIndicesOffset(make([]uint32, len(idx)), got, dim-1, offset)
			assert.ErrorIs(t, err, ErrCorrupt, "%s %s: the bound applies before the offset", name, m)
		}
	}
	_, err := EncodeIndicesFrom(make([]byte, 64), []uint32{5, 9}, 6, IndexAuto)
	assert.Error(t, err, "an index below the base")
	_, err = DecodeIndicesOffset(make([]uint32, 4), []byte{1, 0}, 10, math.MaxUint32-5)
	assert.Error(t, err, "offset + dim past 2^32")
	_, err = DecodeIndicesOffset(make([]uint32, 4), []byte{1, 0}, 0, 1)
	assert.Error(t, err, "an offset needs a bound")
}

// TestIndicesSizeMatchesEncoding checks the one-pass sizes of indexStats
// against the streams actually written, on random index sets whose gaps
// straddle the varint and bit-width boundaries.
func TestIndicesSizeMatchesEncoding(t *testing.T) {
	rng := NewRand(11)
	for trial := range 300 {
		n := int(rng.Uint64() % 700)
		spread := uint32(1) << (rng.Uint64() % 31)
		idx := make([]uint32, 0, n)
		x := uint32(rng.Uint64() % 100)
		for range n {
			idx = append(idx, x)
			step := 1 + uint32(rng.Uint64()%uint64(spread))
			if x > math.MaxUint32-step {
				break
			}
			x += step
		}
		for _, m := range indexMethods {
			size, err := IndicesSize(idx, m)
			require.NoError(t, err)
			enc, err := EncodeIndices(make([]byte, MaxIndicesSize(len(idx), m)), idx, m)
			require.NoError(t, err)
			require.Len(t, enc, size, "trial %d %s", trial, m)
			got, err := DecodeIndices(make([]uint32, len(idx)), enc, 0)
			require.NoError(t, err, "trial %d %s", trial, m)
			require.Equal(t, idx, got, "trial %d %s", trial, m)
		}
		v, _ := IndicesSize(idx, IndexVarint)
		b, _ := IndicesSize(idx, IndexBitPack)
		a, _ := IndicesSize(idx, IndexAuto)
		require.Equal(t, min(v, b), a)
	}
}

// TestUnpackFastMatchesSafe compares the gap unpacking loop with its
// bounds-checked version on random streams, every width, bit offsets
// 0..7 and runs up to the last gap whose load stays inside the stream.
func TestUnpackFastMatchesSafe(t *testing.T) {
	rng := NewRand(5)
	src := make([]byte, 300)
	for i := range src {
		src[i] = byte(rng.Uint64())
	}
	for width := uint(1); width <= 32; width++ {
		for bit := uint(0); bit < 40; bit++ {
			n := int((uint(len(src)-8)*8-bit)/width) + 1 // the most gaps with in-bounds loads
			a, b := make([]uint32, n), make([]uint32, n)
			p1, or1, bit1 := unpackFast(a, 77, src, bit, width)
			p2, or2, bit2 := unpackFastSafe(b, 77, src, bit, width)
			require.Equal(t, b, a, "width %d bit %d", width, bit)
			require.Equal(t, []uint64{p2, or2, uint64(bit2)}, []uint64{p1, or1, uint64(bit1)}, "width %d bit %d", width, bit)
		}
	}
	assert.Panics(t, func() { unpackFast(make([]uint32, 2), 0, src[:8], 1, 8) }, "a second load past the end")
}

// TestPackBlockMatchesReference compares packBlock (its grouped loop for
// widths up to 16 and the carried-bits loop) with a bit-by-bit packer, on
// every width, block lengths around the groups of 8 and destinations with
// and without room for the grouped loop's spare bytes.
func TestPackBlockMatchesReference(t *testing.T) {
	rng := NewRand(9)
	for width := uint(0); width <= 32; width++ {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 127, 128} {
			g := make([]uint32, n)
			for i := range g {
				g[i] = uint32(rng.Uint64() & (1<<width - 1))
				if i == 0 {
					g[i] = uint32(1<<width - 1) // the full width at least once
				}
			}
			size := (n*int(width) + 7) / 8
			want := make([]byte, size)
			for i, x := range g {
				for b := uint(0); b < width; b++ {
					pos := uint(i)*width + b
					want[pos/8] |= byte(x>>b&1) << (pos % 8)
				}
			}
			for _, room := range []int{0, 3, 16, 40} {
				dst := make([]byte, size+room)
				for i := range dst {
					dst[i] = 0xa5 // bytes the packer must overwrite or leave
				}
				got := packBlock(dst, g, width)
				require.Equal(t, size, got, "width %d n %d room %d", width, n, room)
				require.Equal(t, want, dst[:size], "width %d n %d room %d", width, n, room)
			}
		}
	}
}

// TestBlockGapsVarintSizes checks blockGaps' varint byte count (one
// threshold test per gap, the table only for blocks with 3-byte gaps)
// against varintLen, on blocks whose gaps sit at the varint boundaries.
func TestBlockGapsVarintSizes(t *testing.T) {
	rng := NewRand(13)
	edges := []uint32{0, 1, 126, 127, 128, 129, 16382, 16383, 16384, 1<<21 - 1, 1 << 21, 1<<28 - 1, 1 << 28}
	for trial := range 2000 {
		k := 1 + int(rng.Uint64()%IndexBlockSize)
		top := len(edges) - int(rng.Uint64()%uint64(len(edges)-1)) // some blocks without large gaps
		blk := make([]uint32, k+1)
		want := 0
		for i := 1; i <= k; i++ {
			d := edges[rng.Uint64()%uint64(top)]
			if uint64(blk[i-1])+uint64(d)+1 > math.MaxUint32 {
				d = 0 // stay within uint32
			}
			blk[i] = blk[i-1] + d + 1
			want += varintLen(d)
		}
		g := make([]uint32, k)
		or, v := blockGaps(g, blk)
		require.Equal(t, want, v, "trial %d", trial)
		require.Less(t, or, uint64(1)<<32)
		for i := range g {
			require.Equal(t, blk[i+1]-blk[i]-1, g[i])
		}
	}
}
