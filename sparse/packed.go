package sparse

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/quant"
)

// The packed-index encoding of a vector (version 3), little-endian: exact
// values as in version 1, indices compressed losslessly with the index
// stream of the quantized encoding (quant.EncodeIndices, IndexAuto: gap
// coding, then varints or bit packing, whichever is smaller). It exists
// only in the sparse form; a slice that is smaller dense travels in the
// version-1 dense form, and one whose stream would not be smaller than
// the raw uint32 array in the version-1 sparse form.
//
//	offset size field
//	0      1    magic 0x53 ('S')
//	1      1    version (3)
//	2      1    form: 1 sparse (the only one)
//	3      1    value type: 1 float32, 2 float64
//	4      4    count: stored entries
//	8      8    dimension
//	16     8    index stream bytes (at least 2)
//	24          count values, then the index stream
//
// The version byte tells a receiver which encoding a message is in, so
// Decode, DecodeAt, DecodeView, EncodedLen and Peek take either; values
// sit 8-byte aligned behind the 24-byte header, so DecodeView still
// aliases them.
const (
	// PackedHeaderSize is the size of the header of the packed-index
	// encoding.
	PackedHeaderSize = 24

	versionPacked = 3
)

// PackedSize is the size of the packed-index encoding of nnz entries of
// valueSize-byte values whose index stream takes idxBytes.
func PackedSize(nnz, idxBytes, valueSize int) int {
	return PackedHeaderSize + nnz*valueSize + idxBytes
}

// AppendEncodePacked appends v in its smallest exact encoding: dense,
// sparse with packed indices (version 3) or sparse with raw indices.
func (v *Vector[T]) AppendEncodePacked(dst []byte) ([]byte, error) {
	return v.AppendEncodeRangePacked(dst, 0, v.Dim)
}

// AppendEncodeRangePacked is AppendEncodeRange with the indices of a
// sparse slice compressed losslessly (the version-3 encoding) when that
// is the smallest exact form; otherwise it appends what AppendEncodeRange
// would (the smaller of the raw sparse and the dense forms).
// Values are never altered: Decode gives back exactly the entries.
func (v *Vector[T]) AppendEncodeRangePacked(dst []byte, lo, hi int) ([]byte, error) {
	if err := v.checkShape(); err != nil {
		return dst, err
	}
	if lo < 0 || hi < lo || hi > v.Dim {
		return dst, fmt.Errorf("%w: range [%d,%d) outside dimension %d", ErrInvalid, lo, hi, v.Dim)
	}
	if v.Dense || v.IsBlock() {
		// A block vector's indices stay raw (see block.go).
		return v.AppendEncodeRange(dst, lo, hi)
	}
	a, b := v.RangeBounds(lo, hi)
	nnz, s, dim := b-a, ValueSize[T](), hi-lo
	start := len(dst)
	dst = appendHeader(dst, formSparse, typeCode[T](), nnz, dim)
	dst[start+1] = versionPacked
	dst = binary.LittleEndian.AppendUint64(dst, 0) // stream bytes, set once known
	dst = append(dst, valueBytes(v.Values[a:b])...)
	off := len(dst)
	dst = growBytes(dst, quant.MaxIndicesSize(nnz, quant.IndexAuto))
	stream, err := quant.EncodeIndicesFrom(dst[off:off], v.Indices[a:b], uint32(lo), quant.IndexAuto)
	if err != nil {
		return dst[:start], fmt.Errorf("%w: %w", ErrInvalid, err) // unsorted input
	}
	size := PackedSize(nnz, len(stream), s)
	if size >= CompactSize(nnz, dim, s) {
		// Rewind: the raw sparse or the dense form is no larger, and
		// AppendEncodeRange picks the smaller of those two.
		return v.AppendEncodeRange(dst[:start], lo, hi)
	}
	binary.LittleEndian.PutUint64(dst[start+HeaderSize:], uint64(len(stream)))
	return dst[:off+len(stream)], nil
}

// parsePackedHeader checks the packed part of a version-3 header whose
// first 16 bytes parseHeader has read into h (s is the value size), and
// sets the sizes. Every size is bounded by len(b) before it is added.
func parsePackedHeader(b []byte, h *header, s uint64) error {
	if len(b) < PackedHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte packed header", ErrCorrupt, len(b), PackedHeaderSize)
	}
	if h.dense {
		return fmt.Errorf("%w: dense form in a packed-index encoding", ErrCorrupt)
	}
	idxBytes := binary.LittleEndian.Uint64(b[16:])
	if idxBytes < 2 || idxBytes > uint64(len(b)) {
		return fmt.Errorf("%w: %d index stream bytes in a %d-byte message", ErrCorrupt, idxBytes, len(b))
	}
	vals := uint64(h.count) * s // count < 2^32, s <= 8: no overflow
	h.idxBytes = int(idxBytes)
	h.size = PackedHeaderSize + int(vals) + h.idxBytes
	return nil
}

// bodyOffset is where the values start behind h's header.
func (h header) bodyOffset() int {
	if h.version == versionPacked {
		return PackedHeaderSize
	}
	return HeaderSize
}

// IsPacked says whether b starts with a packed-index (version 3)
// encoding, whose indices a receiver decodes rather than views.
func IsPacked(b []byte) bool {
	return len(b) >= 2 && b[0] == magic && b[1] == versionPacked
}

// decodePackedIndices decodes the index stream of the packed message b
// with header h into dst[:h.count], each index plus offset.
func decodePackedIndices[T Float](dst []uint32, b []byte, h header, offset uint32) error {
	stream := b[PackedHeaderSize+h.count*ValueSize[T]() : h.size]
	return decodeQuantIndices(dst, stream, h, offset)
}

// decodePacked is Decode of a checked packed message.
func (v *Vector[T]) decodePacked(b []byte, h header) error {
	s := ValueSize[T]()
	v.Values = grow(v.Values, h.count)
	copy(valueBytes(v.Values), b[PackedHeaderSize:PackedHeaderSize+h.count*s])
	v.Indices = grow(v.Indices, h.count)
	if err := decodePackedIndices[T](v.Indices, b, h, 0); err != nil {
		v.Reset(0)
		return err
	}
	v.Dim = h.dim
	return nil
}

// decodePackedAt is DecodeAt of a checked packed message, lo and v's
// state already checked; the indices are decoded once, into v's array
// (sparse v) or a temporary (dense v), before anything of v is written.
func (v *Vector[T]) decodePackedAt(b []byte, h header, lo int) error {
	s := ValueSize[T]()
	vals := b[PackedHeaderSize : PackedHeaderSize+h.count*s]
	if v.Dense {
		idx := make([]uint32, h.count)
		if err := decodePackedIndices[T](idx, b, h, 0); err != nil {
			return err
		}
		dst := v.Values[lo : lo+h.dim]
		clear(dst)
		for i, x := range idx {
			dst[x] = getValue[T](vals[i*s:])
		}
		return nil
	}
	n := len(v.Indices)
	v.Indices = growKeep(v.Indices, n+h.count)
	if err := decodePackedIndices[T](v.Indices[n:], b, h, uint32(lo)); err != nil {
		v.Indices = v.Indices[:n]
		return err
	}
	v.Values = growKeep(v.Values, n+h.count)
	copy(valueBytes(v.Values[n:]), vals)
	return nil
}

// decodePackedView is DecodeView of a checked packed message at an
// aligned address: the values alias b, the indices are decoded into a
// fresh array (v's old one may alias an earlier message).
func (v *Vector[T]) decodePackedView(b []byte, h header) error {
	v.Dim, v.Dense, v.Indices, v.Values = h.dim, false, nil, nil
	if h.count == 0 {
		return decodePackedIndices[T](nil, b, h, 0)
	}
	idx := make([]uint32, h.count)
	if err := decodePackedIndices[T](idx, b, h, 0); err != nil {
		v.Dim = 0
		return err
	}
	v.Indices = idx
	v.Values = unsafe.Slice((*T)(unsafe.Pointer(&b[PackedHeaderSize])), h.count)
	return nil
}

// appendDenseScatterExact appends the version-1 dense encoding of the
// entries (idx[i] - lo, vals[i]) of a slice of dimension dim.
func appendDenseScatterExact[T Float](dst []byte, idx []uint32, vals []T, lo, dim int) []byte {
	s := ValueSize[T]()
	start := len(dst)
	dst = appendHeader(dst, formDense, typeCode[T](), dim, dim)
	dst = growBytes(dst, dim*s)
	body := dst[start+HeaderSize:]
	clear(body)
	for i, x := range idx {
		if d := int(x) - lo; d >= 0 && d < dim { // false only for unsorted input
			putValue(body[d*s:], vals[i])
		}
	}
	return dst
}
