package sparse

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/quant"
)

// The quantized encoding of a vector (version 2), little-endian. Values
// travel in a lossy codec of package quant; indices stay exact and are
// compressed with quant.EncodeIndices (gap coding, then varints or bit
// packing, whichever is smaller: the stream's first byte says which).
//
//	offset size field
//	0      1    magic 0x53 ('S')
//	1      1    version (2)
//	2      1    form: 1 sparse, 2 dense
//	3      1    value type of the sender's vector: 1 float32, 2 float64
//	4      4    count: stored entries (equals dimension when dense)
//	8      8    dimension
//	16     1    value codec: a lossy quant.Kind (fp16, bf16, q8, q4, q2)
//	17     1    index encoding: 0 none (dense form), 1 quant index stream
//	18     2    reserved (0)
//	20     4    bucket size of a stochastic codec (0 for fp16 and bf16)
//	24     8    index stream bytes (0 when dense)
//	32          the index stream, then the value stream of count values
//
// Everything a receiver needs to parse the message is in-band: the size of
// the value stream follows from the codec, its bucket size and the count,
// so EncodedLen finds the end of a message without a codec, and the
// decoder checks that the codec the header names is the one it expects.
// The sparse form is used only when it is smaller than the dense one, by
// the same comparison of payload sizes as the exact encoding.
const (
	// QuantHeaderSize is the size of the header in front of every
	// quantized encoding.
	QuantHeaderSize = 32

	versionQuant = 2

	indexNone   = 0
	indexStream = 1
)

// QuantCoder encodes vectors with low-precision values and compressed
// indices, and decodes them. It holds the value codec (whose random
// generator a stochastic kind advances at every encoding) and scratch
// space, so it is not safe for concurrent use: give each goroutine its own.
type QuantCoder struct {
	kind   quant.Kind
	bucket int // 0 for the deterministic kinds
	codec  quant.Codec
	// Scratch space: the indices and values of a sparse message
	// DecodeQuantAt scatters into a dense vector, and a dense array for a
	// sparse slice sent dense.
	idx     []uint32
	dense32 []float32
	dense64 []float64
}

// NewQuantCoder returns a coder for the lossy value codec kind (FP16,
// BF16, Q8, Q4 or Q2); opts configures the stochastic kinds (give every
// rank and every call its own Seed). quant.None is refused: exact values
// use the version-1 encoding (AppendEncode, Decode).
func NewQuantCoder(kind quant.Kind, opts quant.Options) (*QuantCoder, error) {
	q := &QuantCoder{}
	if err := q.Reset(kind, opts); err != nil {
		return nil, err
	}
	return q, nil
}

// Reset makes q a fresh coder for kind and opts, as NewQuantCoder would
// return, keeping its scratch space: a caller that keeps a coder across
// operations (reseeding it for each) does not reallocate it. On error q
// is unchanged.
func (q *QuantCoder) Reset(kind quant.Kind, opts quant.Options) error {
	if !kind.Valid() || kind.Lossless() {
		return fmt.Errorf("%w: %v is not a lossy value codec", ErrInvalid, kind)
	}
	codec, err := quant.New(kind, opts)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	q.kind, q.codec, q.bucket = kind, codec, 0
	if kind.Stochastic() {
		q.bucket = opts.BucketSize
		if q.bucket == 0 {
			q.bucket = quant.DefaultBucketSize
		}
	}
	return nil
}

// Kind is the coder's value codec.
func (q *QuantCoder) Kind() quant.Kind { return q.kind }

// BucketSize is the number of values sharing one scale (0 for fp16, bf16).
func (q *QuantCoder) BucketSize() int { return q.bucket }

// ValueBytes is the size of the value stream of n values.
func (q *QuantCoder) ValueBytes(n int) int { return q.codec.EncodedSize(n) }

// QuantValueBytes is the size of the value stream of n values in codec
// kind with the given bucket size (stochastic kinds; ignored otherwise),
// computed from quant's documented stream layouts without building a
// codec; 0 for an invalid or lossless kind. Every input is bounded before
// it is multiplied, so a corrupt header cannot overflow it.
func QuantValueBytes(kind quant.Kind, bucket int, n uint64) uint64 {
	if n == 0 || !kind.Valid() || kind.Lossless() {
		return 0
	}
	if !kind.Stochastic() {
		return n * uint64(kind.Bits()) / 8
	}
	if bucket <= 0 {
		return 0
	}
	b, m := uint64(kind.Bits()), uint64(bucket)
	size := (n / m) * (4 + (m*b+7)/8)
	if rest := n % m; rest > 0 {
		size += 4 + (rest*b+7)/8
	}
	return size
}

// preferDense is the switch rule of the quantized encoding: nnz entries
// whose index stream takes idxBytes are sent dense once their payload
// would reach that of the dim values of the dense form.
func (q *QuantCoder) preferDense(nnz, dim, idxBytes int) bool {
	return q.ValueBytes(nnz)+idxBytes >= q.ValueBytes(dim)
}

// AppendEncodeQuant appends the quantized encoding of v to dst.
func (v *Vector[T]) AppendEncodeQuant(dst []byte, q *QuantCoder) ([]byte, error) {
	return v.AppendEncodeRangeQuant(dst, 0, v.Dim, q)
}

// AppendEncodeRangeQuant appends the quantized encoding of the slice
// [lo, hi) of v as a vector of dimension hi-lo (indices rebased to lo):
// AppendEncodeRange with the values in q's codec and the indices
// compressed. A sparse slice is sent sparse only if that is smaller than
// its dense encoding; a dense vector is always sent dense. Every value is
// quantized exactly once per call. It fails, appending nothing, if v's
// lengths disagree, the range is not within [0, Dim] or a dense slice is
// too long for the count field (2^32 values).
func (v *Vector[T]) AppendEncodeRangeQuant(dst []byte, lo, hi int, q *QuantCoder) ([]byte, error) {
	if err := v.checkShape(); err != nil {
		return dst, err
	}
	if v.IsBlock() {
		return dst, fmt.Errorf("%w: a block vector has no quantized encoding", ErrInvalid)
	}
	if lo < 0 || hi < lo || hi > v.Dim {
		return dst, fmt.Errorf("%w: range [%d,%d) outside dimension %d", ErrInvalid, lo, hi, v.Dim)
	}
	dim := hi - lo
	if v.Dense {
		return appendDenseQuant(dst, v.Values[lo:hi], q)
	}
	a, b := v.RangeBounds(lo, hi)
	nnz := b - a
	start := len(dst)
	dst = appendQuantHeader(dst, formSparse, typeCode[T](), nnz, dim, q)
	dst = growBytes(dst, quant.MaxIndicesSize(nnz, quant.IndexAuto))
	// The stream of the indices rebased to lo, read in place.
	stream, err := quant.EncodeIndicesFrom(dst[start+QuantHeaderSize:], v.Indices[a:b], uint32(lo), quant.IndexAuto)
	if err != nil {
		return dst[:start], fmt.Errorf("%w: %w", ErrInvalid, err) // unsorted input
	}
	if q.preferDense(nnz, dim, len(stream)) {
		// Rewind: the dense form is no larger. Scatter into the
		// coder's zeroed scratch array and quantize that.
		return appendDenseScatter(dst[:start], v.Indices[a:b], v.Values[a:b], lo, dim, q)
	}
	binary.LittleEndian.PutUint64(dst[start+24:], uint64(len(stream)))
	dst = dst[:start+QuantHeaderSize+len(stream)]
	return appendQuantValues(dst, v.Values[a:b], q)
}

// appendDenseQuant appends the dense encoding of vals.
func appendDenseQuant[T Float](dst []byte, vals []T, q *QuantCoder) ([]byte, error) {
	if uint64(len(vals)) >= MaxDim {
		return dst, fmt.Errorf("%w: dense slice of %d values is too long for a quantized encoding", ErrInvalid, len(vals))
	}
	dst = appendQuantHeader(dst, formDense, typeCode[T](), len(vals), len(vals), q)
	return appendQuantValues(dst, vals, q)
}

// appendDenseScatter appends the dense encoding of the entries
// (idx[i] - lo, vals[i]) of a slice of dimension dim, scattered into the
// coder's scratch array.
func appendDenseScatter[T Float](dst []byte, idx []uint32, vals []T, lo, dim int, q *QuantCoder) ([]byte, error) {
	dense := valueScratch[T](q, dim)
	clear(dense)
	for i, x := range idx {
		if d := int(x) - lo; d >= 0 && d < dim { // false only for unsorted input
			dense[d] = vals[i]
		}
	}
	return appendDenseQuant(dst, dense, q)
}

// appendQuantValues appends the value stream of vals.
func appendQuantValues[T Float](dst []byte, vals []T, q *QuantCoder) ([]byte, error) {
	start := len(dst)
	dst = growBytes(dst, q.codec.EncodedSize(len(vals)))
	var err error
	if ValueSize[T]() == 4 {
		_, err = q.codec.Encode(dst[start:], asF32(vals))
	} else {
		_, err = q.codec.Encode64(dst[start:], asF64(vals))
	}
	if err != nil {
		return dst[:start], fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return dst, nil
}

// asF32 views values of a 4-byte float type as []float32, asF64 those of
// an 8-byte type as []float64, and fromF32, fromF64 back: the codecs take
// the built-in types, and a named float type has the same layout.
func asF32[T Float](s []T) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func asF64[T Float](s []T) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func fromF32[T Float](s []float32) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func fromF64[T Float](s []float64) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func appendQuantHeader(dst []byte, form, typ byte, count, dim int, q *QuantCoder) []byte {
	dst = appendHeader(dst, form, typ, count, dim)
	dst[len(dst)-HeaderSize+1] = versionQuant
	dst = append(dst, byte(q.kind), indexNone, 0, 0)
	if form == formSparse {
		dst[len(dst)-3] = indexStream
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(q.bucket))
	return binary.LittleEndian.AppendUint64(dst, 0) // index bytes, set once known
}

// parseQuantHeader checks the quantized part of a version-2 header whose
// first 16 bytes parseHeader has read into h, and sets the sizes.
func parseQuantHeader(b []byte, h *header) error {
	if len(b) < QuantHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte quantized header", ErrCorrupt, len(b), QuantHeaderSize)
	}
	h.kind = quant.Kind(b[16])
	if !h.kind.Valid() || h.kind.Lossless() {
		return fmt.Errorf("%w: value codec %d is not a lossy codec", ErrCorrupt, b[16])
	}
	if b[18] != 0 || b[19] != 0 {
		return fmt.Errorf("%w: reserved header bytes are not zero", ErrCorrupt)
	}
	bucket := binary.LittleEndian.Uint32(b[20:])
	if h.kind.Stochastic() != (bucket != 0) || bucket > quant.MaxBucketSize {
		return fmt.Errorf("%w: bucket size %d for codec %v", ErrCorrupt, bucket, h.kind)
	}
	h.bucket = int(bucket)
	idxBytes := binary.LittleEndian.Uint64(b[24:])
	if h.dense {
		if b[17] != indexNone || idxBytes != 0 || h.dim == MaxDim {
			return fmt.Errorf("%w: dense quantized form with index encoding %d, %d index bytes, dimension %d", ErrCorrupt, b[17], idxBytes, h.dim)
		}
	} else if b[17] != indexStream || idxBytes == 0 || idxBytes > uint64(len(b)) {
		return fmt.Errorf("%w: index encoding %d with %d index bytes", ErrCorrupt, b[17], idxBytes)
	}
	h.idxBytes = int(idxBytes)
	h.size = QuantHeaderSize + h.idxBytes + int(QuantValueBytes(h.kind, h.bucket, uint64(h.count)))
	return nil
}

// DecodeQuant sets v to the quantized vector encoded in b, reusing v's
// buffers. b must hold exactly one version-2 encoding whose value codec
// and bucket size are q's and whose value type is T. As for Decode,
// nothing is trusted: sizes must match the bytes present before anything
// is allocated (so at most 4 entries per byte of b are decoded), the index
// stream must be canonical, strictly increasing, below the dimension and
// announce the header's count, and the value stream must pass the codec's
// checks. On error v is left empty.
func (v *Vector[T]) DecodeQuant(b []byte, q *QuantCoder) error {
	v.Reset(0)
	h, err := parseQuant[T](b, q)
	if err != nil {
		return err
	}
	body := b[QuantHeaderSize:]
	if !h.dense {
		v.Indices = grow(v.Indices, h.count)
		if err := decodeQuantIndices(v.Indices, body[:h.idxBytes], h, 0); err != nil {
			v.Reset(0)
			return err
		}
	}
	v.Values = grow(v.Values, h.count)
	if err := decodeQuantValues(v.Values, body[h.idxBytes:], q); err != nil {
		v.Reset(0)
		return fmt.Errorf("%w: value stream: %w", ErrCorrupt, err)
	}
	v.Dim, v.Dense = h.dim, h.dense
	return nil
}

// DecodeQuantAt is DecodeAt for a quantized encoding (checked as
// DecodeQuant checks it): the vector in b, taken as the slice of v's
// index space that starts at lo, is added to v in place, its indices and
// values decoded straight into v's arrays. A sparse v gets the entries
// appended (indices shifted by lo; slices must come in increasing order
// and after every entry v already has); a dense v gets the values written
// into Values[lo:lo+dim], which must be within v. It is what an allgather
// of disjoint quantized ranges does with each range. On error v's entries
// from before the call are kept, and a dense v is not written.
func (v *Vector[T]) DecodeQuantAt(b []byte, lo int, q *QuantCoder) (dim int, err error) {
	return v.decodeQuantAt(b, lo, q, nil)
}

// DecodeQuantOwnAt is DecodeQuantAt for bytes this process encoded from
// src (AppendEncodeQuant of src, or AppendEncodeRangeQuant of the range
// src is a copy of): indices travel exactly, so they are copied from src,
// shifted by lo, instead of being decoded; the values are decoded from b
// as DecodeQuantAt decodes them. The result is that of DecodeQuantAt. If
// b is not a sparse encoding of src's entries (the encoder sent src dense,
// or src is not what b encodes), it is simply DecodeQuantAt.
func (v *Vector[T]) DecodeQuantOwnAt(b []byte, lo int, q *QuantCoder, src *Vector[T]) (dim int, err error) {
	return v.decodeQuantAt(b, lo, q, src)
}

// decodeQuantAt is DecodeQuantAt, and DecodeQuantOwnAt when own is not
// nil: a sparse v then takes the indices of a sparse message from own
// when its shape matches the header.
func (v *Vector[T]) decodeQuantAt(b []byte, lo int, q *QuantCoder, own *Vector[T]) (int, error) {
	h, err := parseQuant[T](b, q)
	if err != nil {
		return 0, err
	}
	if lo < 0 || lo+h.dim > v.Dim {
		return 0, fmt.Errorf("%w: slice [%d,%d) outside dimension %d", ErrInvalid, lo, lo+h.dim, v.Dim)
	}
	body := b[QuantHeaderSize:]
	stream, vals := body[:h.idxBytes], body[h.idxBytes:]
	if v.Dense {
		dst := v.Values[lo : lo+h.dim]
		if h.dense {
			if err := decodeQuantValues(dst, vals, q); err != nil {
				return 0, fmt.Errorf("%w: value stream: %w", ErrCorrupt, err)
			}
			return h.dim, nil
		}
		// Decode into scratch first, so that a bad message leaves dst
		// untouched, then scatter.
		q.idx = grow(q.idx, h.count)
		if err := decodeQuantIndices(q.idx, stream, h, 0); err != nil {
			return 0, err
		}
		tmp := valueScratch[T](q, h.count)
		if err := decodeQuantValues(tmp, vals, q); err != nil {
			return 0, fmt.Errorf("%w: value stream: %w", ErrCorrupt, err)
		}
		clear(dst)
		for i, x := range q.idx[:h.count] {
			dst[x] = tmp[i]
		}
		return h.dim, nil
	}
	n := len(v.Indices)
	if n > 0 && int(v.Indices[n-1]) >= lo {
		return 0, fmt.Errorf("%w: slice at %d after entry %d", ErrInvalid, lo, v.Indices[n-1])
	}
	v.Indices = growKeep(v.Indices, n+h.count)
	v.Values = growKeep(v.Values, n+h.count)
	out := v.Indices[n:]
	switch {
	case h.dense:
		for i := range out {
			out[i] = uint32(lo + i)
		}
	case own != nil && !own.Dense && own.Dim == h.dim && len(own.Indices) == h.count:
		for i, x := range own.Indices {
			out[i] = x + uint32(lo)
		}
	default:
		if err := decodeQuantIndices(out, stream, h, uint32(lo)); err != nil {
			v.Indices, v.Values = v.Indices[:n], v.Values[:n]
			return 0, err
		}
	}
	if err := decodeQuantValues(v.Values[n:], vals, q); err != nil {
		v.Indices, v.Values = v.Indices[:n], v.Values[:n]
		return 0, fmt.Errorf("%w: value stream: %w", ErrCorrupt, err)
	}
	return h.dim, nil
}

// parseQuant checks that b holds exactly one version-2 encoding of values
// of type T in q's codec and bucket size, and returns its header.
func parseQuant[T Float](b []byte, q *QuantCoder) (header, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, err
	}
	if h.version != versionQuant {
		return h, fmt.Errorf("%w: version %d encoding where a quantized (version %d) one was expected", ErrCorrupt, h.version, versionQuant)
	}
	if h.size != len(b) {
		return h, fmt.Errorf("%w: header announces %d bytes, message has %d", ErrCorrupt, h.size, len(b))
	}
	if h.typ != typeCode[T]() {
		return h, fmt.Errorf("%w: value type %d, expected %d", ErrCorrupt, h.typ, typeCode[T]())
	}
	if h.kind != q.kind || h.bucket != q.bucket {
		return h, fmt.Errorf("%w: values in %v with buckets of %d, expected %v with buckets of %d", ErrCorrupt, h.kind, h.bucket, q.kind, q.bucket)
	}
	return h, nil
}

// decodeQuantIndices decodes the index stream of a sparse message with
// header h into dst[:h.count] (len(dst) >= h.count), each index plus
// offset, after checking that the stream announces the header's count.
func decodeQuantIndices(dst []uint32, stream []byte, h header, offset uint32) error {
	n, err := quant.DecodedIndexCount(stream)
	if err != nil || n != h.count {
		return fmt.Errorf("%w: index stream announces %d indices for a count of %d (%v)", ErrCorrupt, n, h.count, err)
	}
	if h.count == 0 {
		// dim may be 0 (no bound to DecodeIndices), but a count <= dim
		// of zero leaves nothing to bound; only trailing bytes to refuse.
		offset = 0
	}
	if _, err := quant.DecodeIndicesOffset(dst[:h.count:h.count], stream, h.dim, offset); err != nil {
		return fmt.Errorf("%w: index stream: %w", ErrCorrupt, err)
	}
	return nil
}

// valueScratch returns the coder's scratch array of values, n long (the
// one appendDenseScatter uses; a coder serves one goroutine).
func valueScratch[T Float](q *QuantCoder, n int) []T {
	if ValueSize[T]() == 4 {
		q.dense32 = grow(q.dense32, n)
		return fromF32[T](q.dense32)
	}
	q.dense64 = grow(q.dense64, n)
	return fromF64[T](q.dense64)
}

// decodeQuantValues decodes a value stream into dst.
func decodeQuantValues[T Float](dst []T, src []byte, q *QuantCoder) error {
	if ValueSize[T]() == 4 {
		return q.codec.Decode(asF32(dst), src)
	}
	return q.codec.Decode64(asF64(dst), src)
}
