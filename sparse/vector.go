// Package sparse is the sparse vector of sparcml: a dimension and either
// sorted unique (uint32 index, value) pairs or a dense array, never both.
// It holds the validation a collective runs on user input, the wire
// encoding peers exchange (decoded without trusting the peer), and the
// merge and scatter-add kernels the sparse collectives reduce with.
//
// Every kernel writes into a destination the caller owns and reuses its
// capacity, so a training loop that keeps its vectors does not allocate in
// steady state.
package sparse

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// Float is the value type of a vector.
type Float interface{ ~float32 | ~float64 }

// MaxDim is the largest dimension: every index must fit in a uint32.
const MaxDim = 1 << 32

// IndexSize is the size of one index on the wire.
const IndexSize = 4

// Errors, matched with errors.Is.
var (
	// ErrInvalid: a vector built by the caller breaks an invariant.
	ErrInvalid = errors.New("invalid sparse vector")
	// ErrCorrupt: bytes given to Decode are not a valid encoding.
	ErrCorrupt = errors.New("corrupt sparse encoding")
)

// Vector is a vector of Dim values of type T in one of two forms.
//
// Sparse form (Dense false): Indices holds the positions of the stored
// entries, strictly increasing and below Dim, and Values[i] is the value at
// Indices[i]. Positions not listed are zero. A stored entry may itself be
// zero (for example after two entries cancelled out): the form records
// which positions were touched, not which are nonzero.
//
// Dense form (Dense true): Values holds all Dim values; Indices is unused
// (its capacity is kept so the vector can switch back without allocating).
//
// Block form (Block > 1, block.go): each index addresses a row of Block
// contiguous values; Dim counts rows, Values holds len(Indices)*Block
// values sparse and Dim*Block dense. Block 0 and 1 both mean one value
// per index.
//
// The fields are exported so callers can hand in their own buffers;
// Validate checks the invariants, Normalize repairs order and duplicates.
type Vector[T Float] struct {
	Dim     int
	Dense   bool
	Block   int
	Indices []uint32
	Values  []T
}

// NewSparse returns a sparse vector of dimension dim holding values at
// indices. It takes ownership of both slices and validates them: indices
// must be strictly increasing and below dim (use Normalize on the result of
// a literal construction when that cannot be guaranteed).
func NewSparse[T Float](dim int, indices []uint32, values []T) (*Vector[T], error) {
	v := &Vector[T]{Dim: dim, Indices: indices, Values: values}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// FromUnsorted returns a sparse vector of dimension dim from entries in
// any order, possibly repeated: it takes ownership of both slices, sorts
// them and sums the values of repeated indices (see Normalize). Indices
// must still be below dim.
func FromUnsorted[T Float](dim int, indices []uint32, values []T) (*Vector[T], error) {
	v := &Vector[T]{Dim: dim, Indices: indices, Values: values}
	if err := v.Normalize(); err != nil {
		return nil, err
	}
	return v, nil
}

// NewDense returns a dense vector that uses values (not a copy).
func NewDense[T Float](values []T) *Vector[T] {
	return &Vector[T]{Dim: len(values), Dense: true, Values: values}
}

// Zero returns a sparse vector of dimension dim with no stored entries.
func Zero[T Float](dim int) *Vector[T] {
	return &Vector[T]{Dim: dim}
}

// FromDense returns a sparse vector holding the nonzero entries of values.
func FromDense[T Float](values []T) *Vector[T] {
	v := &Vector[T]{Dim: len(values)}
	for i, x := range values {
		if x != 0 {
			v.Indices = append(v.Indices, uint32(i))
			v.Values = append(v.Values, x)
		}
	}
	return v
}

// ValueSize is the size in bytes of one value of type T.
func ValueSize[T Float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// NNZ is the number of stored entries (rows of a block vector):
// len(Indices) in sparse form, Dim in dense form.
func (v *Vector[T]) NNZ() int {
	if v.Dense {
		return v.Dim
	}
	return len(v.Indices)
}

// Reset makes v an empty sparse element vector (Block 0) of dimension
// dim, keeping its buffers' capacity.
func (v *Vector[T]) Reset(dim int) {
	v.Dim, v.Dense, v.Block = dim, false, 0
	v.Indices, v.Values = v.Indices[:0], v.Values[:0]
}

// CopyFrom makes v a copy of o (same form), reusing v's buffers.
func (v *Vector[T]) CopyFrom(o *Vector[T]) {
	v.Dim, v.Dense, v.Block = o.Dim, o.Dense, o.Block
	v.Values = append(v.Values[:0], o.Values...)
	if o.Dense {
		v.Indices = v.Indices[:0]
		return
	}
	v.Indices = append(v.Indices[:0], o.Indices...)
}

// Validate reports the first way v breaks its invariants: dimension out of
// range, lengths that disagree, or an index that is out of range or not
// greater than the one before it (naming its position).
func (v *Vector[T]) Validate() error {
	if err := v.checkShape(); err != nil || v.Dense {
		return err
	}
	return checkIndices(v.Indices, v.Dim, ErrInvalid)
}

// checkShape is the constant-time part of Validate, which every kernel
// runs: dimension in range and slice lengths that agree with the form. The
// order of indices costs a pass and is left to Validate; a kernel given
// unsorted indices returns an unspecified (but memory-safe) result.
func (v *Vector[T]) checkShape() error {
	if v.Dim < 0 || v.Dim > MaxDim {
		return fmt.Errorf("%w: dimension %d outside [0, 2^32]", ErrInvalid, v.Dim)
	}
	if err := v.checkBlock(); err != nil {
		return err
	}
	b := v.BlockLen()
	if v.Dense && len(v.Values) != v.Dim*b {
		return fmt.Errorf("%w: dense vector has %d values for dimension %d of block %d", ErrInvalid, len(v.Values), v.Dim, b)
	}
	if !v.Dense && len(v.Indices)*b != len(v.Values) {
		return fmt.Errorf("%w: %d indices but %d values (block %d)", ErrInvalid, len(v.Indices), len(v.Values), b)
	}
	return nil
}

// checkIndices reports the first index that is out of range or not
// strictly greater than its predecessor, wrapped in kind.
func checkIndices(idx []uint32, dim int, kind error) error {
	prev := -1
	for i, x := range idx {
		if int(x) >= dim {
			return fmt.Errorf("%w: index %d at position %d is out of range for dimension %d", kind, x, i, dim)
		}
		if int(x) <= prev {
			what := "not sorted"
			if int(x) == prev {
				what = "a duplicate"
			}
			return fmt.Errorf("%w: index %d at position %d is %s (previous index %d); indices must be strictly increasing (Normalize sorts and sums duplicates)",
				kind, x, i, what, prev)
		}
		prev = int(x)
	}
	return nil
}

// Normalize sorts a sparse vector's entries by index and sums the values
// of repeated indices (in their original order, so the result is
// deterministic). It fails, leaving v unchanged, if an index is out of
// range or the lengths disagree. A dense vector is left as is. A vector
// already in order costs one pass and no allocation; otherwise a
// temporary of len(Indices) entries is sorted.
func (v *Vector[T]) Normalize() error {
	if v.Dense {
		return v.Validate()
	}
	if v.IsBlock() {
		return v.normalizeBlock()
	}
	if len(v.Indices) != len(v.Values) {
		return fmt.Errorf("%w: %d indices but %d values", ErrInvalid, len(v.Indices), len(v.Values))
	}
	if v.Dim < 0 || v.Dim > MaxDim {
		return fmt.Errorf("%w: dimension %d outside [0, 2^32]", ErrInvalid, v.Dim)
	}
	for i, x := range v.Indices {
		if int(x) >= v.Dim {
			return fmt.Errorf("%w: index %d at position %d is out of range for dimension %d", ErrInvalid, x, i, v.Dim)
		}
	}
	if checkIndices(v.Indices, v.Dim, ErrInvalid) == nil {
		return nil // already normal: the common case costs one pass
	}
	type entry struct {
		idx uint32
		val T
	}
	entries := make([]entry, len(v.Indices))
	for i := range entries {
		entries[i] = entry{v.Indices[i], v.Values[i]}
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		switch {
		case a.idx < b.idx:
			return -1
		case a.idx > b.idx:
			return 1
		}
		return 0
	})
	n := 0
	for i, e := range entries {
		if i > 0 && e.idx == v.Indices[n-1] {
			v.Values[n-1] += e.val
			continue
		}
		v.Indices[n], v.Values[n] = e.idx, e.val
		n++
	}
	v.Indices, v.Values = v.Indices[:n], v.Values[:n]
	return nil
}

// ToDense writes v's dense representation into dst, grown to v.Dim values
// (Dim*Block for a block vector) if its capacity is short, and returns it. Entries of an invalid vector that
// fall outside the dimension are skipped.
func (v *Vector[T]) ToDense(dst []T) []T {
	if v.IsBlock() {
		return v.toDenseBlock(dst)
	}
	dst = grow(dst, v.Dim)
	if v.Dense {
		copy(dst, v.Values)
		return dst
	}
	clear(dst)
	vals := v.Values[:min(len(v.Values), len(v.Indices))]
	for i, x := range v.Indices[:len(vals)] {
		if int(x) < len(dst) {
			dst[x] = vals[i]
		}
	}
	return dst
}

// Densify switches v to dense form in place, reusing the capacity of
// Values when it holds Dim values. v must be valid (entries of an invalid
// vector may be dropped).
func (v *Vector[T]) Densify() {
	if v.Dense {
		return
	}
	if v.IsBlock() {
		v.densifyBlock()
		return
	}
	n := min(len(v.Indices), len(v.Values))
	if cap(v.Values) < v.Dim {
		v.Values = v.ToDense(nil)
	} else {
		// Scatter in place from the back: Indices[i] >= i, so writing
		// position Indices[i] never overwrites an entry not yet read, and
		// the gaps zeroed lie above i too.
		src := v.Values[:n] // n <= Dim unless v is invalid
		vals := v.Values[:v.Dim]
		next := v.Dim
		for i := n - 1; i >= 0; i-- {
			x := int(v.Indices[i])
			if x >= next {
				continue // unsorted or out of range: invalid input
			}
			val := src[i]
			clear(vals[x+1 : next])
			vals[x] = val
			next = x
		}
		clear(vals[:next])
		v.Values = vals
	}
	v.Indices = v.Indices[:0]
	v.Dense = true
}

// Compact switches v to whichever form encodes smaller (see PreferDense).
// Going from dense to sparse drops the zero values (a block vector's rows
// whose values are all zero).
func (v *Vector[T]) Compact() {
	if v.IsBlock() {
		v.compactBlock()
		return
	}
	s := ValueSize[T]()
	if !v.Dense {
		if PreferDense(len(v.Indices), v.Dim, s) {
			v.Densify()
		}
		return
	}
	nz := 0
	for _, x := range v.Values {
		if x != 0 {
			nz++
		}
	}
	if PreferDense(nz, v.Dim, s) {
		return
	}
	// Compacting forward in place is safe: entry k lands at position <= k.
	idx := grow(v.Indices, nz)
	n := 0
	for i, x := range v.Values {
		if x != 0 {
			idx[n] = uint32(i)
			v.Values[n] = x
			n++
		}
	}
	v.Indices, v.Values, v.Dense = idx, v.Values[:n], false
}

// PreferDense is the switch rule: nnz stored entries of valueSize bytes
// are kept dense once the sparse payload, nnz*(IndexSize+valueSize)
// bytes, would reach the dense payload, dim*valueSize bytes.
func PreferDense(nnz, dim, valueSize int) bool {
	return uint64(nnz)*uint64(IndexSize+valueSize) >= uint64(dim)*uint64(valueSize)
}

// grow returns s with length n, reallocating only when its capacity is short.
func grow[E any](s []E, n int) []E {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]E, n)
}
