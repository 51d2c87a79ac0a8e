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
	if m > IndexBitPack {
		return 0, fmt.Errorf("quant: invalid index method %d", uint8(m))
	}
	st, err := indexStats(idx, 0)
	if err != nil {
		return 0, err
	}
	size, _ := st.pick(m)
	return size, nil
}

// EncodeIndices writes the encoding of the strictly increasing indices idx
// into dst[:IndicesSize(idx, m)] and returns that slice. Like Codec.Encode
// it never grows dst: it returns ErrShortBuffer if cap(dst) is too small
// (MaxIndicesSize(len(idx), m) always suffices). Given room for the
// bit-packed stream, IndexAuto may leave bytes of it after a smaller
// varint stream, within cap(dst): only the returned slice is the encoding.
func EncodeIndices(dst []byte, idx []uint32, m IndexMethod) ([]byte, error) {
	return EncodeIndicesFrom(dst, idx, 0, m)
}

// EncodeIndicesFrom is EncodeIndices of the indices idx[i] - base, without
// a rebased copy of idx: the stream of a slice of a vector's index space
// that starts at base. idx[0] must be at least base.
func EncodeIndicesFrom(dst []byte, idx []uint32, base uint32, m IndexMethod) ([]byte, error) {
	if m > IndexBitPack {
		return nil, fmt.Errorf("quant: invalid index method %d", uint8(m))
	}
	if m != IndexVarint && cap(dst) >= MaxIndicesSize(len(idx), IndexBitPack) && uint64(len(idx)) <= math.MaxUint32 &&
		(len(idx) == 0 || idx[0] >= base) {
		return encodeIndicesOnePass(dst[:cap(dst)], idx, base, m)
	}
	st, err := indexStats(idx, base)
	if err != nil {
		return nil, err
	}
	size, m := st.pick(m)
	out, err := output(dst, size)
	if err != nil {
		return nil, err
	}
	off := writeIndexHeader(out, idx, base, m)
	if m == IndexVarint {
		encodeVarintGaps(out[off:], idx)
	} else {
		encodeBitpackGaps(out[off:], idx)
	}
	return out, nil
}

// encodeIndicesOnePass is EncodeIndicesFrom for IndexBitPack and
// IndexAuto into a buffer known to be large enough for the bit-packed
// stream: it packs the gaps and adds up their varint sizes in the same
// pass, and only when the varint stream turns out smaller (IndexAuto)
// writes that one over it: the same bytes as sizing first, without the
// extra pass over the indices in the usual case.
func encodeIndicesOnePass(out []byte, idx []uint32, base uint32, m IndexMethod) ([]byte, error) {
	off := writeIndexHeader(out, idx, base, IndexBitPack)
	packed, varint, ok := encodeBitpackGapsSized(out[off:], idx, m == IndexAuto)
	if !ok {
		return nil, checkIncreasing(idx)
	}
	if m == IndexAuto && varint <= packed { // ties go to varint, as pick does
		out[0] = byte(IndexVarint)
		encodeVarintGaps(out[off:], idx)
		return out[:off+varint], nil
	}
	return out[:off+packed], nil
}

// indexSizes are the stream sizes of one index list with each method.
type indexSizes struct{ varint, bitpack int }

// pick returns the size and method of m, IndexAuto resolved to the
// smaller stream (varint on a tie).
func (s indexSizes) pick(m IndexMethod) (int, IndexMethod) {
	switch {
	case m == IndexVarint, m == IndexAuto && s.varint <= s.bitpack:
		return s.varint, IndexVarint
	}
	return s.bitpack, IndexBitPack
}

// varintLens[bits.Len32(v)] is the length of v as a LEB128 varint.
var varintLens = [64]uint8{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5}

// indexStats computes in one pass over idx the sizes of both encodings of
// idx[i] - base, and checks that idx strictly increases from base on.
// blockGaps computes each gap in 64 bits, so a pair that does not
// increase leaves high bits set instead of wrapping to a plausible gap:
// one test per block instead of a branch per index.
func indexStats(idx []uint32, base uint32) (indexSizes, error) {
	if uint64(len(idx)) > math.MaxUint32 {
		return indexSizes{}, fmt.Errorf("quant: %d indices do not fit an index stream", len(idx))
	}
	if len(idx) > 0 && idx[0] < base {
		return indexSizes{}, fmt.Errorf("quant: index %d below the base %d", idx[0], base)
	}
	head := 1 + varintLen(uint32(len(idx)))
	if len(idx) > 0 {
		head += varintLen(idx[0] - base)
	}
	s := indexSizes{varint: head, bitpack: head}
	var gaps [IndexBlockSize]uint32
	for start := 1; start < len(idx); start += IndexBlockSize {
		end := min(start+IndexBlockSize, len(idx))
		or, v := blockGaps(gaps[:end-start], idx[start-1:end])
		if or>>32 != 0 {
			return indexSizes{}, checkIncreasing(idx)
		}
		s.varint += v
		s.bitpack += 1 + ((end-start)*bits.Len64(or)+7)/8
	}
	return s, nil
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

func writeIndexHeader(dst []byte, idx []uint32, base uint32, m IndexMethod) int {
	dst[0] = byte(m)
	off := 1 + putVarint32(dst[1:], uint32(len(idx)))
	if len(idx) > 0 {
		off += putVarint32(dst[off:], idx[0]-base)
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
	encodeBitpackGapsSized(dst, idx, false)
}

// encodeBitpackGapsSized writes the bit-packed gaps of idx into dst and
// returns their size, the size the same gaps take as varints (when
// withVarint; else 0), and false if idx does not strictly increase (dst
// then holds garbage). Gaps are computed in 64 bits: one that does not
// increase sets high bits, which one test per block catches.
func encodeBitpackGapsSized(dst []byte, idx []uint32, withVarint bool) (packed, varint int, ok bool) {
	off := 0
	var gaps [IndexBlockSize]uint32
	for start := 1; start < len(idx); start += IndexBlockSize {
		end := min(start+IndexBlockSize, len(idx))
		g := gaps[:end-start]
		var or uint64
		var v int
		if withVarint {
			or, v = blockGaps(g, idx[start-1:end])
		} else {
			or = blockGapsOnly(g, idx[start-1:end])
		}
		if or>>32 != 0 {
			return 0, 0, false
		}
		varint += v
		width := uint(bits.Len64(or))
		dst[off] = byte(width)
		off++
		off += packBlock(dst[off:], g, width)
	}
	return off, varint, true
}

// blockGaps writes the gaps of blk (len(g)+1 indices) into g and returns
// their OR, computed in 64 bits (high bits set if blk does not strictly
// increase), and the bytes they take as varints. The hot loops are small
// functions of their own so that their variables stay in registers.
func blockGaps(g, blk []uint32) (uint64, int) {
	prev := uint64(blk[0])
	var or, long uint64
	for i, x := range blk[1 : len(g)+1] {
		d := uint64(x) - prev - 1
		prev = uint64(x)
		or |= d
		g[i] = uint32(d)
		// (d + 2^32 - 2^7) >> 32 is 1 exactly when d >= 2^7, the gaps
		// that take 2 bytes or more as varints (d below 2^32; a larger
		// d fails the block anyway).
		long += (d + (1<<32 - 1<<7)) >> 32
	}
	if or < 1<<14 {
		return or, len(g) + int(long) // no gap takes 3 bytes
	}
	v := 0
	for _, d := range g {
		v += int(varintLens[bits.Len32(d)&63])
	}
	return or, v
}

// blockGapsOnly is blockGaps without the varint sizes.
func blockGapsOnly(g, blk []uint32) uint64 {
	blk = blk[:len(g)+1]
	var or uint64
	for i := range g {
		d := uint64(blk[i+1]) - uint64(blk[i]) - 1
		or |= d
		g[i] = uint32(d)
	}
	return or
}

// packBlock writes the width-bit fields of g into dst, low bits first,
// and returns the bytes written, ceil(len(g)*width/8).
func packBlock(dst []byte, g []uint32, width uint) int {
	width &= 63
	off := 0
	if width > 0 && width <= 16 {
		var done int
		done, off = packGroups(dst, g, width)
		g = g[done:]
	}
	// The rest (all of it for widths above 16). Pending bits, low first:
	// below 32 before a gap is added, so never more than 63; every full
	// 32 bits go out as one store.
	var acc uint64
	var filled uint
	for _, x := range g {
		acc |= uint64(x) << (filled & 63)
		filled += width
		if filled >= 32 {
			binary.LittleEndian.PutUint32(dst[off:], uint32(acc))
			acc >>= 32
			filled -= 32
			off += 4
		}
	}
	for ; filled > 0; filled -= min(filled, 8) {
		dst[off] = byte(acc)
		acc >>= 8
		off++
	}
	return off
}

// packGroups is packBlock's main loop for widths 1 to 16: 8 gaps take
// exactly width bytes, so each group of 8 starts on a byte boundary and
// is built in two 64-bit words from shifts by multiples of width, no gap
// waiting for the previous one's (packBlock's loop carries the bit count
// from gap to gap), then stored as two unaligned 8-byte words whose bytes
// past the group are zeros that the next group, or packBlock's tail,
// overwrites. It packs the groups whose 16 bytes lie inside dst and
// returns the gaps and bytes done. TestPackBlockMatchesReference compares
// packBlock with a bit-by-bit packer.
func packGroups(dst []byte, g []uint32, width uint) (int, int) {
	half := 4 * width // the bits of 4 gaps, 4 to 64
	i, off := 0, 0
	for ; i+8 <= len(g) && off+16 <= len(dst); i += 8 {
		q := g[i : i+8 : i+8]
		a := uint64(q[0]) | uint64(q[1])<<(width&63) | uint64(q[2])<<((2*width)&63) | uint64(q[3])<<((3*width)&63)
		b := uint64(q[4]) | uint64(q[5])<<(width&63) | uint64(q[6])<<((2*width)&63) | uint64(q[7])<<((3*width)&63)
		binary.LittleEndian.PutUint64(dst[off:], a|b<<half)      // half = 64: b<<64 is 0
		binary.LittleEndian.PutUint64(dst[off+8:], b>>(64-half)) // 0 for width <= 8
		off += int(width)
	}
	return i, off
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
	return DecodeIndicesOffset(dst, src, dim, 0)
}

// DecodeIndicesOffset is DecodeIndices that stores every index plus
// offset: the indices of a slice of a larger index space that starts at
// offset, decoded straight into place. The checks are those of
// DecodeIndices on the indices before the offset is added; dim must be
// positive and offset+dim at most 2^32 when offset is not 0.
func DecodeIndicesOffset(dst []uint32, src []byte, dim int, offset uint32) ([]uint32, error) {
	if offset != 0 && (dim <= 0 || uint64(offset)+uint64(dim) > math.MaxUint32+1) {
		return nil, fmt.Errorf("quant: offset %d with dimension %d leaves the uint32 index space", offset, dim)
	}
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
	out[0] = h.first + offset
	var end int
	if h.method == IndexVarint {
		end, err = decodeVarintGaps(out, src, h.size, limit+uint64(offset), uint64(offset))
	} else {
		end, err = decodeBitpackGaps(out, src, h.size, limit+uint64(offset), uint64(offset))
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

// decodeVarintGaps and decodeBitpackGaps decode the gaps after out[0],
// which holds the first index plus offset; limit is the exclusive bound
// on the indices plus offset.
func decodeVarintGaps(out []uint32, src []byte, off int, limit, offset uint64) (int, error) {
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
			return 0, indexRangeError(index-offset, limit-offset)
		}
		out[i] = uint32(index)
	}
	return off, nil
}

func decodeBitpackGaps(out []uint32, src []byte, off int, limit, offset uint64) (int, error) {
	prev := uint64(out[0])
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
		nbits := (end - start) * int(width)
		size := (nbits + 7) / 8
		if size > len(src)-off {
			return 0, corruptf("truncated bitpack block")
		}
		var or uint64
		prev, or = unpackGaps(out[start:end], prev, src, off, width)
		// Indices only grow, so the block's last one bounds them all.
		if prev >= limit {
			return 0, firstOutOfRange(out[start-1:end], limit, offset)
		}
		// The block is exactly the bits of its gaps rounded up to bytes:
		// the bits after the last gap must be zero padding.
		if r := nbits & 7; r != 0 && src[off+size-1]>>r != 0 {
			return 0, corruptf("nonzero padding bits in bitpack block")
		}
		// The encoder always uses the smallest width; accepting only
		// that keeps every index list to exactly one encoding.
		if uint(bits.Len64(or)) != width {
			return 0, corruptf("bit width %d is not the minimal %d", width, bits.Len64(or))
		}
		off += size
	}
	return off, nil
}

// firstOutOfRange is the error of a block whose indices passed limit:
// it names the first one (out holds the previous index and the block,
// stored modulo 2^32, so the walk redoes the sums in 64 bits from the
// gaps they imply).
func firstOutOfRange(out []uint32, limit, offset uint64) error {
	prev := uint64(out[0])
	for _, x := range out[1:] {
		next := prev + (uint64(x)-prev)&math.MaxUint32
		if next >= limit {
			return indexRangeError(next-offset, limit-offset)
		}
		prev = next
	}
	return indexRangeError(prev-offset, limit-offset) // not reached
}

// unpackGaps decodes the width-bit gaps of one block, which starts at
// byte off of src, into out, after the index prev; it returns the last
// index (in 64 bits: it can pass 2^32 on corrupt input, which the caller
// checks once per block) and the OR of the gaps. The leading groups of 8
// gaps go to the vector kernel where there is one (unpackGapsVec); after
// them each gap is one 8-byte load at its bit offset (a gap of up to 32
// bits plus a shift of up to 7 fits in 64), which may read the following
// blocks' bytes, masked off;
// only the gaps whose load would pass the end of src read a zero-padded
// copy of the last bytes. No branch depends on the data.
func unpackGaps(out []uint32, prev uint64, src []byte, off int, width uint) (uint64, uint64) {
	if width == 0 {
		for i := range out {
			prev++
			out[i] = uint32(prev)
		}
		return prev, 0
	}
	done, prev, vecOr := unpackGapsVec(out, prev, src, off, width)
	out = out[done:]
	mask := uint64(1)<<width - 1
	bit := uint(off)*8 + uint(done)*width // a whole number of bytes
	// The gaps i with (bit + i*width)/8 + 8 <= len(src) load inside src.
	fast := 0
	if room := len(src) - 8; room >= int(bit>>3) {
		fast = min(len(out), int((uint(room)*8+7-bit)/width)+1)
	}
	prev, or, bit := unpackFast(out[:fast], prev, src, bit, width)
	or |= vecOr
	if fast < len(out) {
		var tail [16]byte
		at := bit >> 3
		copy(tail[:8], src[at:])
		for i := fast; i < len(out); i++ {
			w := binary.LittleEndian.Uint64(tail[(bit>>3-at)&7:])
			g := w >> (bit & 7) & mask
			bit += width
			or |= g
			prev += g + 1
			out[i] = uint32(prev)
		}
	}
	return prev, or
}
