package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// IndexMethod chooses how EncodeIndices compresses sorted indices.
type IndexMethod uint8

const (
	// IndexAuto picks whichever of IndexVarint and IndexBitPack gives the
	// smaller stream (one extra pass over the indices).
	IndexAuto IndexMethod = 0
	// IndexVarint stores each gap as a LEB128 varint: 1 byte for gaps
	// below 128, 2 below 16384. Good for irregular gaps.
	IndexVarint IndexMethod = 1
	// IndexBitPack stores the gaps of each block of IndexBlockSize in the
	// bit width of the block's largest gap. Good for runs and for
	// uniformly spread indices; a block of consecutive indices costs 1 byte.
	IndexBitPack IndexMethod = 2
)

// IndexBlockSize is the number of gaps that share one bit width in
// IndexBitPack streams.
const IndexBlockSize = 128

// String returns "auto", "varint" or "bitpack".
func (m IndexMethod) String() string {
	switch m {
	case IndexAuto:
		return "auto"
	case IndexVarint:
		return "varint"
	case IndexBitPack:
		return "bitpack"
	}
	return fmt.Sprintf("indexmethod(%d)", uint8(m))
}

// Index stream layout:
//
//	method  1 byte: 1 = varint, 2 = bitpack
//	count   LEB128 varint (at most 5 bytes, minimal)
//	first   LEB128 varint: the first index (only when count > 0)
//	gaps    count-1 gaps, g = idx[i] - idx[i-1] - 1 (>= 0 as indices
//	        strictly increase), either
//	          varint:  one minimal LEB128 varint (<= 5 bytes) per gap, or
//	          bitpack: per block of up to 128 gaps one width byte w in 0..32
//	                   and ceil(k*w/8) bytes holding the k gaps as w-bit
//	                   fields, low bits first, unused high bits zero.
//
// Storing gap-1 rather than the gap makes runs of consecutive indices all
// zeros: width 0 in bitpack, and 1 byte per index in varint.

const maxVarint32Len = 5

// MaxIndicesSize returns an upper bound on the size of the encoding of n
// indices with method m (any valid method, IndexAuto included), good for
// allocating a buffer once; 0 for n < 0 or an invalid method.
func MaxIndicesSize(n int, m IndexMethod) int {
	if n < 0 || m > IndexBitPack {
		return 0
	}
	header := 1 + 2*maxVarint32Len
	gaps := max(n-1, 0)
	varint := header + maxVarint32Len*gaps
	blocks := (gaps + IndexBlockSize - 1) / IndexBlockSize
	bitpack := header + blocks + 4*gaps
	switch m {
	case IndexVarint:
		return varint
	case IndexBitPack:
		return bitpack
	}
	return max(varint, bitpack)
}

// IndicesSize returns the exact size of the encoding of idx with method m
// (for IndexAuto, the size of the method it picks), or an error if idx is
// not strictly increasing.
func IndicesSize(idx []uint32, m IndexMethod) (int, error) {
	if err := checkIncreasing(idx); err != nil {
		return 0, err
	}
	switch m {
	case IndexVarint:
		return varintIndicesSize(idx), nil
	case IndexBitPack:
		return bitpackIndicesSize(idx), nil
	case IndexAuto:
		return min(varintIndicesSize(idx), bitpackIndicesSize(idx)), nil
	}
	return 0, fmt.Errorf("quant: invalid index method %d", uint8(m))
}

// EncodeIndices writes the encoding of the strictly increasing indices idx
// into dst[:IndicesSize(idx, m)] and returns that slice. Like Codec.Encode
// it never grows dst: it returns ErrShortBuffer if cap(dst) is too small
// (MaxIndicesSize(len(idx), m) always suffices).
func EncodeIndices(dst []byte, idx []uint32, m IndexMethod) ([]byte, error) {
	if err := checkIncreasing(idx); err != nil {
		return nil, err
	}
	var size int
	switch m {
	case IndexVarint:
		size = varintIndicesSize(idx)
	case IndexBitPack:
		size = bitpackIndicesSize(idx)
	case IndexAuto:
		size, m = varintIndicesSize(idx), IndexVarint
		if bp := bitpackIndicesSize(idx); bp < size {
			size, m = bp, IndexBitPack
		}
	default:
		return nil, fmt.Errorf("quant: invalid index method %d", uint8(m))
	}
	out, err := output(dst, size)
	if err != nil {
		return nil, err
	}
	off := writeIndexHeader(out, idx, m)
	if m == IndexVarint {
		encodeVarintGaps(out[off:], idx)
	} else {
		encodeBitpackGaps(out[off:], idx)
	}
	return out, nil
}

// checkIncreasing rejects indices that do not strictly increase, and a
// count the header cannot hold (only the full set of 2^32 indices).
func checkIncreasing(idx []uint32) error {
	if uint64(len(idx)) > math.MaxUint32 {
		return fmt.Errorf("quant: %d indices do not fit an index stream", len(idx))
	}
	for i := 1; i < len(idx); i++ {
		if idx[i] <= idx[i-1] {
			return fmt.Errorf("quant: indices not strictly increasing at position %d (%d after %d)", i, idx[i], idx[i-1])
		}
	}
	return nil
}

// gap returns the stored gap before idx[i], i >= 1.
func gap(idx []uint32, i int) uint32 {
	return idx[i] - idx[i-1] - 1
}

func varintLen(v uint32) int {
	// 1 byte per started group of 7 bits; 0 still takes one byte.
	return max(1, (bits.Len32(v)+6)/7)
}

func headerSize(idx []uint32) int {
	size := 1 + varintLen(uint32(len(idx)))
	if len(idx) > 0 {
		size += varintLen(idx[0])
	}
	return size
}

func varintIndicesSize(idx []uint32) int {
	size := headerSize(idx)
	for i := 1; i < len(idx); i++ {
		size += varintLen(gap(idx, i))
	}
	return size
}

func bitpackIndicesSize(idx []uint32) int {
	size := headerSize(idx)
	for start := 1; start < len(idx); start += IndexBlockSize {
		end := min(start+IndexBlockSize, len(idx))
		size += 1 + ((end-start)*blockWidth(idx, start, end)+7)/8
	}
	return size
}

// blockWidth is the bit width of the largest gap before idx[start:end].
func blockWidth(idx []uint32, start, end int) int {
	var or uint32
	for i := start; i < end; i++ {
		or |= gap(idx, i)
	}
	return bits.Len32(or)
}

func putVarint32(dst []byte, v uint32) int {
	n := 0
	for v >= 0x80 {
		dst[n] = byte(v) | 0x80
		v >>= 7
		n++
	}
	dst[n] = byte(v)
	return n + 1
}

func writeIndexHeader(dst []byte, idx []uint32, m IndexMethod) int {
	dst[0] = byte(m)
	off := 1 + putVarint32(dst[1:], uint32(len(idx)))
	if len(idx) > 0 {
		off += putVarint32(dst[off:], idx[0])
	}
	return off
}

func encodeVarintGaps(dst []byte, idx []uint32) {
	off := 0
	for i := 1; i < len(idx); i++ {
		off += putVarint32(dst[off:], gap(idx, i))
	}
}

func encodeBitpackGaps(dst []byte, idx []uint32) {
	off := 0
	for start := 1; start < len(idx); start += IndexBlockSize {
		end := min(start+IndexBlockSize, len(idx))
		width := uint(blockWidth(idx, start, end))
		dst[off] = byte(width)
		off++
		var acc uint64 // pending bits, low first; never more than 39
		var filled uint
		for i := start; i < end; i++ {
			acc |= uint64(gap(idx, i)) << filled
			filled += width
			for filled >= 8 {
				dst[off] = byte(acc)
				acc >>= 8
				filled -= 8
				off++
			}
		}
		if filled > 0 {
			dst[off] = byte(acc)
			off++
		}
	}
}

// readVarint32 reads a minimal LEB128 varint of at most 32 bits.
func readVarint32(src []byte) (uint32, int, error) {
	var v uint32
	for i := 0; i < maxVarint32Len; i++ {
		if i >= len(src) {
			return 0, 0, corruptf("truncated varint")
		}
		b := src[i]
		if i == maxVarint32Len-1 && b > 0x0f {
			return 0, 0, corruptf("varint overflows 32 bits")
		}
		v |= uint32(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 {
				return 0, 0, corruptf("over-long varint")
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, corruptf("varint overflows 32 bits") // unreachable: 5th byte checked above
}

// indexHeader is the decoded start of an index stream.
type indexHeader struct {
	method IndexMethod
	count  int
	first  uint32
	size   int // bytes of header
}

func readIndexHeader(src []byte) (indexHeader, error) {
	var h indexHeader
	if len(src) == 0 {
		return h, corruptf("empty index stream")
	}
	h.method = IndexMethod(src[0])
	if h.method != IndexVarint && h.method != IndexBitPack {
		return h, corruptf("unknown index method %d", src[0])
	}
	count, n, err := readVarint32(src[1:])
	if err != nil {
		return h, err
	}
	h.count, h.size = int(count), 1+n
	if h.count == 0 {
		return h, nil
	}
	h.first, n, err = readVarint32(src[h.size:])
	if err != nil {
		return h, err
	}
	h.size += n
	// A count the remaining bytes cannot hold is a lie: refuse it before
	// anyone sizes a buffer by it. Varint gaps take >= 1 byte each;
	// bitpack blocks take >= 1 byte per 128 gaps.
	rest := len(src) - h.size
	maxGaps := rest
	if h.method == IndexBitPack {
		maxGaps = rest * IndexBlockSize
	}
	if h.count-1 > maxGaps {
		return h, corruptf("index count %d does not fit in %d bytes", h.count, len(src))
	}
	return h, nil
}

// DecodedIndexCount returns the number of indices in an index stream,
// after checking that the stream is long enough to hold them, so a
// receiver can size (or bound) its buffer before DecodeIndices.
func DecodedIndexCount(src []byte) (int, error) {
	h, err := readIndexHeader(src)
	return h.count, err
}

// DecodeIndices decodes an index stream into dst[:count] and returns that
// slice. It never allocates: if cap(dst) is below the count it returns an
// error wrapping ErrShortBuffer. It checks that the indices strictly
// increase, fit in uint32, are below dim when dim > 0 (dim <= 0 means no
// bound), that varints and bit widths are minimal, padding bits zero and
// that no bytes trail the stream, so every index list has exactly one valid
// encoding per method; any violation returns an error wrapping ErrCorrupt
// (the contents of dst are then unspecified).
func DecodeIndices(dst []uint32, src []byte, dim int) ([]uint32, error) {
	h, err := readIndexHeader(src)
	if err != nil {
		return nil, err
	}
	if h.count > cap(dst) {
		return nil, fmt.Errorf("%w: %d indices, room for %d", ErrShortBuffer, h.count, cap(dst))
	}
	limit := uint64(math.MaxUint32) + 1 // exclusive bound on indices
	if dim > 0 {
		limit = min(limit, uint64(dim))
	}
	out := dst[:h.count]
	if h.count == 0 {
		return out, expectEnd(src, h.size)
	}
	if uint64(h.first) >= limit {
		return nil, indexRangeError(uint64(h.first), limit)
	}
	out[0] = h.first
	var end int
	if h.method == IndexVarint {
		end, err = decodeVarintGaps(out, src, h.size, limit)
	} else {
		end, err = decodeBitpackGaps(out, src, h.size, limit)
	}
	if err != nil {
		return nil, err
	}
	return out, expectEnd(src, end)
}

func expectEnd(src []byte, end int) error {
	if end != len(src) {
		return corruptf("%d bytes trail the index stream", len(src)-end)
	}
	return nil
}

func indexRangeError(index, limit uint64) error {
	return corruptf("index %d out of range [0, %d)", index, limit)
}

func decodeVarintGaps(out []uint32, src []byte, off int, limit uint64) (int, error) {
	for i := 1; i < len(out); i++ {
		var g uint32
		if off < len(src) && src[off] < 0x80 {
			g = uint32(src[off]) // the common one-byte gap, without the call
			off++
		} else {
			var n int
			var err error
			if g, n, err = readVarint32(src[off:]); err != nil {
				return 0, err
			}
			off += n
		}
		index := uint64(out[i-1]) + uint64(g) + 1 // in uint64: cannot wrap
		if index >= limit {
			return 0, indexRangeError(index, limit)
		}
		out[i] = uint32(index)
	}
	return off, nil
}

func decodeBitpackGaps(out []uint32, src []byte, off int, limit uint64) (int, error) {
	for start := 1; start < len(out); start += IndexBlockSize {
		end := min(start+IndexBlockSize, len(out))
		if off >= len(src) {
			return 0, corruptf("truncated bitpack block")
		}
		width := uint(src[off])
		off++
		if width > 32 {
			return 0, corruptf("bit width %d above 32", width)
		}
		size := ((end-start)*int(width) + 7) / 8
		if size > len(src)-off {
			return 0, corruptf("truncated bitpack block")
		}
		if err := unpackGaps(out, start, end, src[off:off+size], width, limit); err != nil {
			return 0, err
		}
		off += size
	}
	return off, nil
}

// unpackGaps decodes the width-bit gaps of one block into out[start:end].
// Each gap is read with one 8-byte load at its bit offset (a gap of up to
// 32 bits plus a shift of up to 7 fits in 64), the block's last few gaps
// from a zero-padded copy of its tail.
func unpackGaps(out []uint32, start, end int, block []byte, width uint, limit uint64) error {
	mask := uint64(1)<<width - 1
	var or uint32 // of all gaps, to check that width is minimal
	var tail [16]byte
	fast := len(block) - 8 // bytes from which an 8-byte load stays inside block
	bit := uint(0)
	prev := uint64(out[start-1])
	for i := start; i < end; i++ {
		at := int(bit >> 3)
		var w uint64
		if at <= fast {
			w = binary.LittleEndian.Uint64(block[at:])
		} else {
			copy(tail[:], block[at:])
			w = binary.LittleEndian.Uint64(tail[:])
			clear(tail[:])
		}
		g := uint32(w >> (bit & 7) & mask)
		bit += width
		or |= g
		index := prev + uint64(g) + 1 // in uint64: cannot wrap
		if index >= limit {
			return indexRangeError(index, limit)
		}
		out[i] = uint32(index)
		prev = index
	}
	// The block is exactly the bits of its gaps rounded up to bytes: the
	// bits after the last gap must be zero padding.
	if r := bit & 7; r != 0 && block[len(block)-1]>>r != 0 {
		return corruptf("nonzero padding bits in bitpack block")
	}
	// The encoder always uses the smallest width; accepting only that keeps
	// every index list to exactly one encoding.
	if uint(bits.Len32(or)) != width {
		return corruptf("bit width %d is not the minimal %d", width, bits.Len32(or))
	}
	return nil
}
