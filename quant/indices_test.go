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
