package sparse

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/sparcml/sparcml/internal/keyheap"
)

// Block (row-sparse) vectors. A vector with Block b > 1 is a matrix of
// Dim rows of b contiguous values: each index addresses a row, so an
// embedding gradient of R touched rows of width b is R indices and R*b
// values, not R*b indices. Every length rule of the element form holds
// with "entry" read as "row": Values holds len(Indices)*b values sparse,
// Dim*b dense. The switch rule, the encodings and the kernels treat a row
// as one wide value of b*ValueSize bytes, so PreferDense(nnz, dim,
// v.EntrySize()) is the rule and the collectives' ranges are row ranges.
//
// The block wire encoding (version 4), little-endian:
//
//	offset size field
//	0      1    magic 0x53 ('S')
//	1      1    version (4)
//	2      1    form: 1 sparse, 2 dense
//	3      1    value type: 1 float32, 2 float64
//	4      4    count: stored rows (equals dimension when dense)
//	8      8    dimension in rows
//	16     4    block: values per row, 2 to MaxBlock
//	20     4    reserved (0)
//	24          count*block values, then (sparse only) count uint32 row indices
//
// Payload: count*(IndexSize + block*valueSize) bytes sparse, dim*block*
// valueSize dense. Block vectors travel with raw row indices only: with
// rows of b values the indices are 4/(4+4b) of a sparse message (1.5% for
// b = 64), so packing them saves too little to pay its codec; and no lossy
// codec takes them (AppendEncodeRangeQuant refuses).
const (
	// BlockHeaderSize is the size of the header of the block encoding.
	BlockHeaderSize = 24
	// MaxBlock is the widest row a block vector may have.
	MaxBlock = 1 << 20

	versionBlock = 4
)

// NewBlockSparse returns a row-sparse vector of rows rows of width
// values each, holding the rows at indices (strictly increasing, below
// rows) with their values concatenated, len(indices)*width of them. It
// takes ownership of both slices and validates them. A width of 1 gives
// an element vector.
func NewBlockSparse[T Float](rows, width int, indices []uint32, values []T) (*Vector[T], error) {
	v := &Vector[T]{Dim: rows, Block: width, Indices: indices, Values: values}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// BlockLen is the number of values each index addresses: Block, or 1 for
// an element vector (Block 0 or 1).
func (v *Vector[T]) BlockLen() int { return max(v.Block, 1) }

// EntrySize is the size in bytes of the values of one stored entry (a
// row of a block vector): what the switch rule and the encodings count
// per index.
func (v *Vector[T]) EntrySize() int { return v.BlockLen() * ValueSize[T]() }

// IsBlock says whether v is a block vector (rows of more than one value).
func (v *Vector[T]) IsBlock() bool { return v.Block > 1 }

// checkBlock is checkShape's rule for the block field.
func (v *Vector[T]) checkBlock() error {
	if v.Block < 0 || v.Block > MaxBlock {
		return fmt.Errorf("%w: block %d outside [0, %d]", ErrInvalid, v.Block, MaxBlock)
	}
	if uint64(v.Dim)*uint64(v.BlockLen()) > 1<<40 {
		return fmt.Errorf("%w: %d rows of %d values exceed 2^40 values", ErrInvalid, v.Dim, v.Block)
	}
	return nil
}

// sameBlock reports a mismatch of the parts' block sizes.
func sameBlock[T Float](a, b *Vector[T]) error {
	if a.BlockLen() != b.BlockLen() {
		return fmt.Errorf("%w: combining vectors of block %d and %d", ErrInvalid, a.BlockLen(), b.BlockLen())
	}
	return nil
}

// RowIsZero says whether every value of row r of a dense block (or
// element) vector's Values is zero.
func rowIsZero[T Float](vals []T) bool {
	for _, x := range vals {
		if x != 0 {
			return false
		}
	}
	return true
}

// compactBlock is Compact for a block vector: dense to sparse drops the
// rows whose values are all zero.
func (v *Vector[T]) compactBlock() {
	b, es := v.BlockLen(), v.EntrySize()
	if !v.Dense {
		if PreferDense(len(v.Indices), v.Dim, es) {
			v.Densify()
		}
		return
	}
	nz := 0
	for r := range v.Dim {
		if !rowIsZero(v.Values[r*b : (r+1)*b]) {
			nz++
		}
	}
	if PreferDense(nz, v.Dim, es) {
		return
	}
	v.keepNonzeroRows(nz)
}

// Sparsify switches v to sparse form whatever the sizes: a dense vector
// keeps the entries (rows of a block vector) that hold a nonzero value.
// It is how a caller that wants rows, not a matrix, reads a result the
// library returned dense.
func (v *Vector[T]) Sparsify() {
	if !v.Dense {
		return
	}
	b, nz := v.BlockLen(), 0
	for r := range v.Dim {
		if !rowIsZero(v.Values[r*b : (r+1)*b]) {
			nz++
		}
	}
	v.keepNonzeroRows(nz)
}

// keepNonzeroRows turns the dense v, of which nz rows hold a nonzero
// value, into the sparse vector of those rows.
func (v *Vector[T]) keepNonzeroRows(nz int) {
	b := v.BlockLen()
	// Forward in place is safe: row k lands at a row <= k.
	idx := grow(v.Indices, nz)
	n := 0
	for r := range v.Dim {
		row := v.Values[r*b : (r+1)*b]
		if !rowIsZero(row) {
			idx[n] = uint32(r)
			copy(v.Values[n*b:], row)
			n++
		}
	}
	v.Indices, v.Values, v.Dense = idx, v.Values[:n*b], false
}

// toDenseBlock is ToDense for a block vector.
func (v *Vector[T]) toDenseBlock(dst []T) []T {
	b := v.BlockLen()
	dst = grow(dst, v.Dim*b)
	if v.Dense {
		copy(dst, v.Values)
		return dst
	}
	clear(dst)
	n := min(len(v.Indices), len(v.Values)/b)
	for i, x := range v.Indices[:n] {
		if int(x) < v.Dim {
			copy(dst[int(x)*b:(int(x)+1)*b], v.Values[i*b:(i+1)*b])
		}
	}
	return dst
}

// densifyBlock is Densify for a block vector, in place from the back
// (row Indices[i] >= i) when Values has room for every row.
func (v *Vector[T]) densifyBlock() {
	b := v.BlockLen()
	n := min(len(v.Indices), len(v.Values)/b)
	if cap(v.Values) < v.Dim*b {
		v.Values = v.toDenseBlock(nil)
	} else {
		vals := v.Values[:v.Dim*b]
		next := v.Dim
		for i := n - 1; i >= 0; i-- {
			x := int(v.Indices[i])
			if x >= next {
				continue // unsorted or out of range: invalid input
			}
			copy(vals[x*b:(x+1)*b], vals[i*b:(i+1)*b]) // memmove: x >= i
			clear(vals[(x+1)*b : next*b])
			next = x
		}
		clear(vals[:next*b])
		v.Values = vals
	}
	v.Indices = v.Indices[:0]
	v.Dense = true
}

// sumBlocks is SumAll (and Add) for block vectors of one dimension and
// block, dst not among them: a dense accumulator when any part is dense,
// else a k-way merge of rows whose result goes dense when the exact union
// passes the rule (as the element kernels decide). Rows with the same
// index are added in parts order (the first copied), so every rank that
// sums the same parts gets the same bits.
func sumBlocks[T Float](dst *Vector[T], parts []*Vector[T]) error {
	dim, b, es := parts[0].Dim, parts[0].BlockLen(), parts[0].EntrySize()
	dense, total := false, 0
	for _, p := range parts {
		if err := sameBlock(parts[0], p); err != nil {
			return err
		}
		dense = dense || p.Dense
		total += p.NNZ()
	}
	dst.Block = parts[0].Block
	if len(parts) == 1 {
		dst.CopyFrom(parts[0])
		return nil
	}
	if dense {
		dst.Dim, dst.Dense = dim, true
		dst.Values = grow(dst.Values, dim*b)
		dst.Indices = dst.Indices[:0]
		clear(dst.Values)
		for _, p := range parts {
			if err := addToBlock(dst.Values, p); err != nil {
				return err
			}
		}
		return nil
	}
	mergeRows(dst, parts, total)
	if PreferDense(len(dst.Indices), dim, es) {
		dst.Densify()
	}
	return nil
}

// mergeRows merges sparse block parts with a min-heap of keys
// row<<32 | part, so equal rows meet in parts order.
func mergeRows[T Float](dst *Vector[T], parts []*Vector[T], total int) {
	b := parts[0].BlockLen()
	idx := grow(dst.Indices, total)
	val := grow(dst.Values, total*b)
	pos := make([]int, len(parts))
	heap := make([]uint64, 0, len(parts))
	for p, v := range parts {
		if len(v.Indices) > 0 {
			heap = append(heap, uint64(v.Indices[0])<<32|uint64(p))
		}
	}
	keyheap.Init(heap)
	n := 0
	for len(heap) > 0 {
		key := heap[0]
		p, x := int(uint32(key)), uint32(key>>32)
		i := pos[p]
		row := parts[p].Values[i*b : (i+1)*b]
		if n > 0 && idx[n-1] == x {
			addDense(val[(n-1)*b:n*b], val[(n-1)*b:n*b], row)
		} else {
			idx[n] = x
			copy(val[n*b:(n+1)*b], row)
			n++
		}
		pos[p]++
		if pos[p] < len(parts[p].Indices) {
			heap[0] = uint64(parts[p].Indices[pos[p]])<<32 | uint64(p)
		} else {
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		keyheap.Down(heap, 0)
	}
	dst.Dim, dst.Dense = parts[0].Dim, false
	dst.Indices, dst.Values = idx[:n], val[:n*b]
}

// addToBlock adds block vector v into dense (v.Dim*b values): row by row
// when sparse, element-wise when dense.
func addToBlock[T Float](dense []T, v *Vector[T]) error {
	b := v.BlockLen()
	if len(dense) != v.Dim*b {
		return fmt.Errorf("%w: adding %d rows of %d values into %d values", ErrInvalid, v.Dim, b, len(dense))
	}
	if v.Dense {
		addDense(dense, dense, v.Values)
		return nil
	}
	for i, x := range v.Indices {
		if int(x) >= v.Dim {
			return errOutOfRange(x, i, v.Dim)
		}
		row := dense[int(x)*b : (int(x)+1)*b]
		addDense(row, row, v.Values[i*b:(i+1)*b])
	}
	return nil
}

// appendBlockHeader appends the version-4 header.
func appendBlockHeader(dst []byte, form, typ byte, count, dim, block int) []byte {
	dst = appendHeader(dst, form, typ, count, dim)
	dst[len(dst)-HeaderSize+1] = versionBlock
	dst = binary.LittleEndian.AppendUint32(dst, uint32(block))
	return binary.LittleEndian.AppendUint32(dst, 0)
}

// appendEncodeRangeBlock is AppendEncodeRange for a block vector: rows
// [lo, hi) as a block vector of hi-lo rows, in the smaller form.
func (v *Vector[T]) appendEncodeRangeBlock(dst []byte, lo, hi int) []byte {
	b, typ, dim := v.BlockLen(), typeCode[T](), hi-lo
	if v.Dense {
		dst = appendBlockHeader(dst, formDense, typ, dim, dim, b)
		return append(dst, valueBytes(v.Values[lo*b:hi*b])...)
	}
	a, e := v.RangeBounds(lo, hi)
	nnz := e - a
	if PreferDense(nnz, dim, v.EntrySize()) {
		dst = appendBlockHeader(dst, formDense, typ, dim, dim, b)
		start := len(dst)
		dst = growBytes(dst, dim*v.EntrySize())
		body := dst[start:]
		clear(body)
		es := v.EntrySize()
		for i, x := range v.Indices[a:e] {
			copy(body[(int(x)-lo)*es:], valueBytes(v.Values[(a+i)*b:(a+i+1)*b]))
		}
		return dst
	}
	dst = appendBlockHeader(dst, formSparse, typ, nnz, dim, b)
	dst = append(dst, valueBytes(v.Values[a*b:e*b])...)
	start := len(dst)
	dst = growBytes(dst, nnz*IndexSize)
	out := dst[start:]
	for i, x := range v.Indices[a:e] {
		binary.LittleEndian.PutUint32(out[i*IndexSize:], x-uint32(lo))
	}
	return dst
}

// parseBlockHeader checks the block part of a version-4 header whose
// first 16 bytes parseHeader has read into h, and sets the size. count
// and dim are at most 2^32 and the block at most 2^20, so no product
// overflows 64 bits.
func parseBlockHeader(b []byte, h *header, s uint64) error {
	if len(b) < BlockHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte block header", ErrCorrupt, len(b), BlockHeaderSize)
	}
	block := uint64(binary.LittleEndian.Uint32(b[16:]))
	if block < 2 || block > MaxBlock || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return fmt.Errorf("%w: block %d outside [2, %d] or reserved bytes set", ErrCorrupt, block, MaxBlock)
	}
	if uint64(h.dim)*block > 1<<40 {
		return fmt.Errorf("%w: %d rows of %d values exceed 2^40 values", ErrCorrupt, h.dim, block)
	}
	payload := uint64(h.count) * (IndexSize + block*s)
	if h.dense {
		payload = uint64(h.dim) * block * s
	}
	if payload > uint64(len(b)) {
		return fmt.Errorf("%w: header announces %d payload bytes, %d present", ErrCorrupt, payload, len(b))
	}
	h.block = int(block)
	h.size = BlockHeaderSize + int(payload)
	return nil
}

// decodeBlock is Decode of a checked block message.
func (v *Vector[T]) decodeBlock(b []byte, h header) error {
	nv := h.count * h.block
	body := b[BlockHeaderSize:]
	v.Values = grow(v.Values, nv)
	copy(valueBytes(v.Values), body[:nv*ValueSize[T]()])
	v.Block = h.block
	if h.dense {
		v.Dim, v.Dense = h.dim, true
		return nil
	}
	v.Indices = grow(v.Indices, h.count)
	ib := body[nv*ValueSize[T]():]
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

// decodeBlockView is DecodeView of a checked block message at an address
// aligned for T: values and indices alias b.
func (v *Vector[T]) decodeBlockView(b []byte, h header) error {
	body := b[BlockHeaderSize:]
	nv := h.count * h.block
	v.Dim, v.Dense, v.Block, v.Indices, v.Values = h.dim, h.dense, h.block, nil, nil
	if nv > 0 {
		v.Values = unsafe.Slice((*T)(unsafe.Pointer(&body[0])), nv)
	}
	if h.dense || h.count == 0 {
		return nil
	}
	v.Indices = unsafe.Slice((*uint32)(unsafe.Pointer(&body[nv*ValueSize[T]()])), h.count)
	if err := checkIndices(v.Indices, h.dim, ErrCorrupt); err != nil {
		v.Dim, v.Block, v.Indices, v.Values = 0, 0, nil, nil
		return err
	}
	return nil
}

// decodeBlockAt is DecodeAt of a checked block message, lo and v's state
// already checked (v must have the message's block). A dense slice adds
// to a sparse v only its rows that hold a nonzero value: a range of the
// result that went dense on the wire does not come back as zero rows.
func (v *Vector[T]) decodeBlockAt(b []byte, h header, lo int) error {
	if v.BlockLen() != h.block {
		return fmt.Errorf("%w: a slice of block %d into a vector of block %d", ErrCorrupt, h.block, v.BlockLen())
	}
	bl, es := h.block, h.block*ValueSize[T]()
	body := b[BlockHeaderSize:]
	vals := body[:h.count*es]
	ib := body[len(vals):]
	if v.Dense {
		dst := v.Values[lo*bl : (lo+h.dim)*bl]
		if h.dense {
			copy(valueBytes(dst), vals)
			return nil
		}
		clear(dst)
		prev := int64(-1)
		for i := range h.count {
			x := binary.LittleEndian.Uint32(ib[i*IndexSize:])
			if int64(x) <= prev || int(x) >= h.dim {
				return badIndices(ib, h.dim)
			}
			prev = int64(x)
			copy(valueBytes(dst[int(x)*bl:(int(x)+1)*bl]), vals[i*es:(i+1)*es])
		}
		return nil
	}
	n := len(v.Indices)
	if h.dense {
		appendNonzeroRows(v, valuesOf[T](vals), lo)
		return nil
	}
	v.Indices = growKeep(v.Indices, n+h.count)
	out := v.Indices[n:]
	{
		prev := int64(-1)
		for i := range out {
			x := binary.LittleEndian.Uint32(ib[i*IndexSize:])
			if int64(x) <= prev || int(x) >= h.dim {
				v.Indices = v.Indices[:n]
				return badIndices(ib, h.dim)
			}
			prev = int64(x)
			out[i] = x + uint32(lo)
		}
	}
	v.Values = growKeep(v.Values, (n+h.count)*bl)
	copy(valueBytes(v.Values[n*bl:]), vals)
	return nil
}

// normalizeBlock is Normalize for a sparse block vector: rows sorted by
// index (stably), the values of repeated rows summed in their original
// order. A vector already in order costs one pass and no allocation.
func (v *Vector[T]) normalizeBlock() error {
	if err := v.checkShape(); err != nil {
		return err
	}
	for i, x := range v.Indices {
		if int(x) >= v.Dim {
			return fmt.Errorf("%w: index %d at position %d is out of range for dimension %d", ErrInvalid, x, i, v.Dim)
		}
	}
	if checkIndices(v.Indices, v.Dim, ErrInvalid) == nil {
		return nil
	}
	b := v.BlockLen()
	order := make([]int, len(v.Indices))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(v.Indices[i], v.Indices[j]) })
	idx := make([]uint32, 0, len(order))
	vals := make([]T, 0, len(v.Values))
	for _, i := range order {
		row := v.Values[i*b : (i+1)*b]
		if n := len(idx); n > 0 && idx[n-1] == v.Indices[i] {
			last := vals[(n-1)*b:]
			addDense(last, last, row)
			continue
		}
		idx = append(idx, v.Indices[i])
		vals = append(vals, row...)
	}
	v.Indices = append(v.Indices[:0], idx...)
	v.Values = append(v.Values[:0], vals...)
	return nil
}

// anyBlock says whether a part is a block vector.
func anyBlock[T Float](parts []*Vector[T]) bool {
	for _, p := range parts {
		if p.IsBlock() {
			return true
		}
	}
	return false
}

// addAllToBlock is AddAllTo for block parts: each added in turn, in parts
// order for every value (rows are contiguous, so a part's scatter is
// already a sequence of row-long adds).
func addAllToBlock[T Float](dense []T, parts []*Vector[T]) error {
	for _, p := range parts {
		if err := sameBlock(parts[0], p); err != nil {
			return err
		}
		if err := addToBlock(dense, p); err != nil {
			return err
		}
	}
	return nil
}

// AppendNonzeroRows appends to the sparse block vector v the rows of
// dense (rows of v's block, the first at row lo) that hold a nonzero
// value: how a range of a block result that went dense joins a sparse
// result without all-zero rows.
func AppendNonzeroRows[T Float](v *Vector[T], dense []T, lo int) {
	appendNonzeroRows(v, dense, lo)
}

func appendNonzeroRows[T Float](v *Vector[T], dense []T, lo int) {
	b := v.BlockLen()
	for r := range len(dense) / b {
		row := dense[r*b : (r+1)*b]
		if !rowIsZero(row) {
			v.Indices = append(v.Indices, uint32(lo+r))
			v.Values = append(v.Values, row...)
		}
	}
}

// valuesOf views encoded values as T. The bytes need not be aligned for
// T: they are read through a copy when not.
func valuesOf[T Float](b []byte) []T {
	s := ValueSize[T]()
	if len(b) == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(s) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/s)
	}
	out := make([]T, len(b)/s)
	copy(valueBytes(out), b)
	return out
}
