package sparse

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/quant"
)

// The wire encoding of a vector, little-endian:
//
//	offset size field
//	0      1    magic 0x53 ('S')
//	1      1    version (1)
//	2      1    form: 1 sparse, 2 dense
//	3      1    value type: 1 float32, 2 float64 (collectives.DType's codes)
//	4      4    count: stored entries (equals dimension when dense)
//	8      8    dimension
//	16          count values, then (sparse only) count uint32 indices
//
// Version 2 (quantized.go) carries lossy values, version 3 (packed.go)
// exact values with packed indices, version 4 (block.go) rows of a block
// vector; the version byte says which, so every decoder of exact values
// takes versions 1, 3 and 4.
//
// The form is in-band, as in SparCML's streams, so a receiver learns from
// the message itself whether a partial result went dense. Values come
// before indices so that 8-byte values sit 8-byte aligned behind the
// 16-byte header without padding; the payload is exactly
// count*(IndexSize+valueSize) bytes sparse or dim*valueSize bytes dense.
const (
	// HeaderSize is the size of the header in front of every encoding.
	HeaderSize = 16

	magic   = 0x53
	version = 1

	formSparse = 1
	formDense  = 2

	typeFloat32 = 1
	typeFloat64 = 2
)

// EncodedSize is the size of the encoding of nnz stored entries of a
// dimension-dim vector, in the form given.
func EncodedSize(nnz, dim, valueSize int, dense bool) int {
	if dense {
		return HeaderSize + dim*valueSize
	}
	return HeaderSize + nnz*(IndexSize+valueSize)
}

// CompactSize is the size of the smaller of the two encodings of nnz
// stored entries of a dimension-dim vector, the one AppendEncode picks.
func CompactSize(nnz, dim, valueSize int) int {
	return EncodedSize(nnz, dim, valueSize, PreferDense(nnz, dim, valueSize))
}

func typeCode[T Float]() byte {
	if ValueSize[T]() == 4 {
		return typeFloat32
	}
	return typeFloat64
}

// AppendEncode appends the encoding of v, in its smaller form, to dst.
// A sparse vector whose entries would take at least as many bytes as the
// dense array is encoded dense. It fails, appending nothing, if v's
// lengths disagree (see Validate).
func (v *Vector[T]) AppendEncode(dst []byte) ([]byte, error) {
	return v.AppendEncodeRange(dst, 0, v.Dim)
}

// AppendEncodeRange appends the encoding of the slice [lo, hi) of v as a
// vector of dimension hi-lo (indices rebased to lo), in its smaller form.
// It is what a split algorithm sends to a range's owner: no copy of the
// slice is made. It fails, appending nothing, if v's lengths disagree or
// the range is not within [0, Dim].
func (v *Vector[T]) AppendEncodeRange(dst []byte, lo, hi int) ([]byte, error) {
	if err := v.checkShape(); err != nil {
		return dst, err
	}
	if lo < 0 || hi < lo || hi > v.Dim {
		return dst, fmt.Errorf("%w: range [%d,%d) outside dimension %d", ErrInvalid, lo, hi, v.Dim)
	}
	if v.IsBlock() {
		return v.appendEncodeRangeBlock(dst, lo, hi), nil
	}
	s := ValueSize[T]()
	dim := hi - lo
	if v.Dense {
		return appendDense(dst, v.Values[lo:hi]), nil
	}
	a, b := v.RangeBounds(lo, hi)
	nnz := b - a
	if PreferDense(nnz, dim, s) {
		return appendDenseScatterExact(dst, v.Indices[a:b], v.Values[a:b], lo, dim), nil
	}
	dst = appendHeader(dst, formSparse, typeCode[T](), nnz, dim)
	dst = append(dst, valueBytes(v.Values[a:b])...)
	start := len(dst)
	dst = growBytes(dst, nnz*IndexSize)
	out := dst[start:]
	base := uint32(lo)
	for i, x := range v.Indices[a:b] {
		binary.LittleEndian.PutUint32(out[i*IndexSize:], x-base)
	}
	return dst, nil
}

// RangeBounds returns the positions [a, b) in Indices of the entries with
// index in [lo, hi), by binary search. Only for the sparse form.
func (v *Vector[T]) RangeBounds(lo, hi int) (a, b int) {
	a = LowerBound(v.Indices, lo)
	b = a + LowerBound(v.Indices[a:], hi)
	return a, b
}

// LowerBound is the first position in the sorted indices idx whose index
// is >= x (len(idx) if none), by binary search.
func LowerBound(idx []uint32, x int) int {
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(idx[m]) < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func appendDense[T Float](dst []byte, vals []T) []byte {
	dst = appendHeader(dst, formDense, typeCode[T](), len(vals), len(vals))
	return append(dst, valueBytes(vals)...)
}

func appendHeader(dst []byte, form, typ byte, count, dim int) []byte {
	dst = append(dst, magic, version, form, typ)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(count))
	return binary.LittleEndian.AppendUint64(dst, uint64(dim))
}

// header is a parsed, checked header.
type header struct {
	version byte
	dense   bool
	typ     byte
	count   int
	dim     int
	size    int // total encoded size

	// Version 2 (quantized) only.
	kind     quant.Kind
	bucket   int
	idxBytes int

	// Version 4 (block) only: values per row.
	block int
}

// parseHeader checks the header at the start of b, exact (version 1) or
// quantized (version 2), and computes the total size it announces,
// without trusting any field: the size is computed in 64 bits and
// compared with what is there before anything is allocated.
func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), HeaderSize)
	}
	if b[0] != magic || (b[1] != version && b[1] != versionQuant && b[1] != versionPacked && b[1] != versionBlock) {
		return h, fmt.Errorf("%w: bad magic/version %#x/%d", ErrCorrupt, b[0], b[1])
	}
	h.version = b[1]
	h.typ = b[3]
	var s uint64
	switch h.typ {
	case typeFloat32:
		s = 4
	case typeFloat64:
		s = 8
	default:
		return h, fmt.Errorf("%w: unknown value type %d", ErrCorrupt, h.typ)
	}
	count := uint64(binary.LittleEndian.Uint32(b[4:]))
	dim := binary.LittleEndian.Uint64(b[8:])
	if dim > MaxDim {
		return h, fmt.Errorf("%w: dimension %d above 2^32", ErrCorrupt, dim)
	}
	var payload uint64
	switch b[2] {
	case formSparse:
		if count > dim {
			return h, fmt.Errorf("%w: %d entries for dimension %d", ErrCorrupt, count, dim)
		}
		payload = count * (IndexSize + s)
	case formDense:
		h.dense = true
		if count != dim && !(dim == MaxDim && count == 0) {
			return h, fmt.Errorf("%w: dense count %d differs from dimension %d", ErrCorrupt, count, dim)
		}
		count = dim
		payload = dim * s
	default:
		return h, fmt.Errorf("%w: unknown form %d", ErrCorrupt, b[2])
	}
	h.count, h.dim = int(count), int(dim)
	switch h.version {
	case versionQuant:
		return h, parseQuantHeader(b, &h)
	case versionPacked:
		return h, parsePackedHeader(b, &h, s)
	case versionBlock:
		return h, parseBlockHeader(b, &h, s)
	}
	h.size = HeaderSize + int(payload)
	return h, nil
}

// EncodedLen returns the size of the encoded vector at the start of b, so
// that several encodings can be concatenated in one message without any
// framing. It fails if the header is corrupt or announces more bytes than b
// holds.
func EncodedLen(b []byte) (int, error) {
	h, err := parseHeader(b)
	if err != nil {
		return 0, err
	}
	if h.size > len(b) {
		return 0, fmt.Errorf("%w: header announces %d bytes, %d present", ErrCorrupt, h.size, len(b))
	}
	return h.size, nil
}

// parseExact checks that b holds exactly one exact encoding (version 1,
// or 3 with packed indices) of values of type T and returns its header.
func parseExact[T Float](b []byte) (header, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, err
	}
	if h.version == versionQuant {
		return h, fmt.Errorf("%w: quantized (version %d) encoding where an exact one was expected", ErrCorrupt, h.version)
	}
	if h.size != len(b) {
		return h, fmt.Errorf("%w: header announces %d bytes, message has %d", ErrCorrupt, h.size, len(b))
	}
	if h.typ != typeCode[T]() {
		return h, fmt.Errorf("%w: value type %d, expected %d", ErrCorrupt, h.typ, typeCode[T]())
	}
	return h, nil
}

// Decode sets v to the vector encoded in b, reusing v's buffers. b must
// hold exactly one encoding. Nothing in b is trusted: the header must be
// consistent with the length of b (so a lying header cannot cause a large
// allocation), the value type must be T, and indices must be strictly
// increasing and below the dimension. On error v is left empty.
func (v *Vector[T]) Decode(b []byte) error {
	v.Reset(0)
	h, err := parseExact[T](b)
	if err != nil {
		return err
	}
	switch h.version {
	case versionPacked:
		return v.decodePacked(b, h)
	case versionBlock:
		return v.decodeBlock(b, h)
	}
	s := ValueSize[T]()
	body := b[HeaderSize:]
	v.Values = grow(v.Values, h.count)
	copy(valueBytes(v.Values), body[:h.count*s])
	if h.dense {
		v.Dim, v.Dense = h.dim, true
		return nil
	}
	v.Indices = grow(v.Indices, h.count)
	ib := body[h.count*s:]
	for i := range v.Indices {
		v.Indices[i] = binary.LittleEndian.Uint32(ib[i*IndexSize:])
	}
	if err := checkIndices(v.Indices, h.dim, ErrCorrupt); err != nil {
		v.Reset(0)
		return err
	}
	v.Dim = h.dim
	return nil
}

// valueBytes views values as bytes (host order, which is the wire's
// little-endian on every platform this library supports).
func valueBytes[T Float](vals []T) []byte {
	if len(vals) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), len(vals)*ValueSize[T]())
}

// putValue writes x at the start of b, which need not be aligned.
func putValue[T Float](b []byte, x T) {
	if ValueSize[T]() == 4 {
		binary.LittleEndian.PutUint32(b, *(*uint32)(unsafe.Pointer(&x)))
		return
	}
	binary.LittleEndian.PutUint64(b, *(*uint64)(unsafe.Pointer(&x)))
}

// growBytes extends dst by n bytes, reallocating only when short.
func growBytes(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst[:len(dst)+n]
	}
	out := make([]byte, len(dst)+n, 2*cap(dst)+n)
	copy(out, dst)
	return out
}

// Peek returns the dimension, the number of stored entries and the form of
// the encoded vector at the start of b after checking its header and that
// b holds the whole encoding; the entries themselves are checked by Decode.
func Peek(b []byte) (dim, nnz int, dense bool, err error) {
	h, err := parseHeader(b)
	if err != nil {
		return 0, 0, false, err
	}
	if h.size > len(b) {
		return 0, 0, false, fmt.Errorf("%w: header announces %d bytes, %d present", ErrCorrupt, h.size, len(b))
	}
	return h.dim, h.count, h.dense, nil
}

// DecodeAt adds the vector encoded in b, taken as the slice of v's index
// space that starts at lo, to v in place: a sparse v gets the entries
// appended (indices shifted by lo), so slices must come in increasing
// order and after every entry v already has; a dense v gets the values
// written into Values[lo:lo+dim], which must be within v. It is what an
// allgather of disjoint ranges does with each range, without decoding
// into a temporary first. b is checked as Decode checks it; on error v's
// entries from before the call are kept and the error says why.
func (v *Vector[T]) DecodeAt(b []byte, lo int) (dim int, err error) {
	h, err := parseExact[T](b)
	if err != nil {
		return 0, err
	}
	if lo < 0 || lo+h.dim > v.Dim {
		return 0, fmt.Errorf("%w: slice [%d,%d) outside dimension %d", ErrInvalid, lo, lo+h.dim, v.Dim)
	}
	if n := len(v.Indices); !v.Dense && n > 0 && int(v.Indices[n-1]) >= lo {
		return 0, fmt.Errorf("%w: slice at %d after entry %d", ErrInvalid, lo, v.Indices[n-1])
	}
	if (h.version == versionBlock) != v.IsBlock() {
		return 0, fmt.Errorf("%w: a slice of block %d into a vector of block %d", ErrCorrupt, max(h.block, 1), v.BlockLen())
	}
	switch h.version {
	case versionPacked:
		if err := v.decodePackedAt(b, h, lo); err != nil {
			return 0, err
		}
		return h.dim, nil
	case versionBlock:
		if err := v.decodeBlockAt(b, h, lo); err != nil {
			return 0, err
		}
		return h.dim, nil
	}
	body := b[HeaderSize:]
	vals := body[:h.count*ValueSize[T]()]
	if v.Dense {
		dst := v.Values[lo : lo+h.dim]
		if h.dense {
			copy(valueBytes(dst), vals)
			return h.dim, nil
		}
		clear(dst)
		return h.dim, scatterEncoded(dst, body[len(vals):], vals, h.dim)
	}
	n := len(v.Indices)
	v.Indices = growKeep(v.Indices, n+h.count)
	v.Values = growKeep(v.Values, n+h.count)
	copy(valueBytes(v.Values[n:]), vals)
	out := v.Indices[n:]
	if h.dense {
		for i := range out {
			out[i] = uint32(lo + i)
		}
		return h.dim, nil
	}
	ib := body[len(vals):]
	prev := int64(-1)
	for i := range out {
		x := binary.LittleEndian.Uint32(ib[i*IndexSize:])
		if int64(x) <= prev || int(x) >= h.dim {
			v.Indices, v.Values = v.Indices[:n], v.Values[:n]
			return 0, badIndices(ib, h.dim)
		}
		prev = int64(x)
		out[i] = x + uint32(lo)
	}
	return h.dim, nil
}

// scatterEncoded writes the values at the encoded indices ib into dst,
// checking each index as Decode does.
func scatterEncoded[T Float](dst []T, ib, vals []byte, dim int) error {
	s := ValueSize[T]()
	prev := int64(-1)
	for i := 0; i < len(ib)/IndexSize; i++ {
		x := binary.LittleEndian.Uint32(ib[i*IndexSize:])
		if int64(x) <= prev || int(x) >= dim {
			return badIndices(ib, dim)
		}
		prev = int64(x)
		dst[x] = getValue[T](vals[i*s:])
	}
	return nil
}

// badIndices describes what is wrong with a raw index array that failed
// the fast check, with checkIndices' message.
func badIndices(ib []byte, dim int) error {
	idx := make([]uint32, len(ib)/IndexSize)
	for i := range idx {
		idx[i] = binary.LittleEndian.Uint32(ib[i*IndexSize:])
	}
	if err := checkIndices(idx, dim, ErrCorrupt); err != nil {
		return err
	}
	return fmt.Errorf("%w: bad index array", ErrCorrupt)
}

// getValue reads a value from the start of b, which need not be aligned.
func getValue[T Float](b []byte) T {
	if ValueSize[T]() == 4 {
		u := binary.LittleEndian.Uint32(b)
		return T(*(*float32)(unsafe.Pointer(&u)))
	}
	u := binary.LittleEndian.Uint64(b)
	return T(*(*float64)(unsafe.Pointer(&u)))
}

// growKeep extends s to length n keeping its contents, with room to spare
// so a run of appends reallocates only a few times.
func growKeep[E any](s []E, n int) []E {
	if cap(s) >= n {
		return s[:n]
	}
	out := make([]E, n, max(n, 2*cap(s)))
	copy(out, s)
	return out
}

// DecodeView is Decode without the copy where it can be avoided: when b's
// values and indices are aligned for their types in memory, v's Values
// and Indices alias b (checked exactly as Decode checks them); otherwise
// it decodes into v's own buffers like Decode. Either way v is valid on
// success, but after an aliasing decode it is only good while b is, and
// must not be modified or handed to Reset-and-reuse code that writes into
// it. It is for summing received messages in place.
func (v *Vector[T]) DecodeView(b []byte) error {
	s := ValueSize[T]()
	if len(b) < HeaderSize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(s) != 0 {
		return v.Decode(b)
	}
	h, err := parseExact[T](b)
	if err != nil {
		v.Reset(0)
		return err
	}
	switch h.version {
	case versionPacked:
		v.Block = 0
		return v.decodePackedView(b, h)
	case versionBlock:
		return v.decodeBlockView(b, h)
	}
	body := b[HeaderSize:]
	v.Dim, v.Dense, v.Block, v.Indices, v.Values = h.dim, h.dense, 0, nil, nil
	if h.count > 0 {
		v.Values = unsafe.Slice((*T)(unsafe.Pointer(&body[0])), h.count)
	}
	if h.dense || h.count == 0 {
		return nil
	}
	v.Indices = unsafe.Slice((*uint32)(unsafe.Pointer(&body[h.count*s])), h.count)
	if err := checkIndices(v.Indices, h.dim, ErrCorrupt); err != nil {
		v.Dim, v.Indices, v.Values = 0, nil, nil
		return err
	}
	return nil
}
