package sparcml

import "github.com/sparcml/sparcml/sparse"

// SparseVector is a vector of Dim values in one of two forms: sparse
// (Dense false), where Indices lists the positions of the stored entries,
// strictly increasing and below Dim, Values[i] is the value at Indices[i]
// and every other position is zero; or dense (Dense true), where Values
// holds all Dim values. The sparse collectives take either form and return
// whichever is smaller.
//
// Build one with NewSparseVector (sorted unique indices, validated),
// SparseVectorFromUnsorted (any order, repeats summed), SparseVectorFromDense
// (the nonzeros of a dense slice) or DenseSparseVector (a dense slice as
// is), or fill the exported fields directly. Its methods (those of
// sparse.Vector, which it is an alias of):
//
//   - NNZ: the stored entries (Dim in dense form);
//   - ToDense(dst): the dense values, written into dst's capacity;
//   - Normalize: sorts the entries and sums repeated indices;
//   - Validate: reports the first broken invariant;
//   - Densify and Compact: switch to dense, or to the smaller form;
//   - CopyFrom and Reset: reuse a vector's buffers;
//   - Sparsify: the stored entries (rows) holding a nonzero value, whatever
//     the form.
//
// A row-sparse vector (Block > 1, built with NewRowSparseVector) is a
// matrix of Dim rows of Block values each, an embedding gradient for
// instance: each index addresses a row, Values holds len(Indices)*Block
// values (Dim*Block dense), and a row travels as one index and its values.
// SparseAllreduce sums such vectors with every algorithm but
// AlgoHierarchical, exactly (WithQuant is refused).
type SparseVector[T Float] = sparse.Vector[T]

// NewRowSparseVector returns a row-sparse vector of rows rows of width
// values each, holding the rows at indices (strictly increasing, below
// rows) whose values follow one another in values (len(indices)*width of
// them). It takes ownership of both slices. An error wrapping ErrInvalid
// of package sparse says what is wrong.
func NewRowSparseVector[T Float](rows, width int, indices []uint32, values []T) (*SparseVector[T], error) {
	return sparse.NewBlockSparse(rows, width, indices, values)
}

// NewSparseVector returns a sparse vector of dimension dim holding values
// at indices, which must be strictly increasing and below dim (an error
// wrapping ErrInvalid of package sparse says where they are not). It takes
// ownership of both slices.
func NewSparseVector[T Float](dim int, indices []uint32, values []T) (*SparseVector[T], error) {
	return sparse.NewSparse(dim, indices, values)
}

// SparseVectorFromUnsorted returns a sparse vector of dimension dim from
// entries in any order, possibly repeated: it sorts them by index and sums
// the values of repeated indices, in their original order, so the result
// is deterministic. Indices must be below dim. It takes ownership of both
// slices.
func SparseVectorFromUnsorted[T Float](dim int, indices []uint32, values []T) (*SparseVector[T], error) {
	return sparse.FromUnsorted(dim, indices, values)
}

// SparseVectorFromDense returns a sparse vector of dimension len(values)
// holding the nonzero entries of values (copied).
func SparseVectorFromDense[T Float](values []T) *SparseVector[T] {
	return sparse.FromDense(values)
}

// DenseSparseVector returns a vector in dense form that uses values, not a
// copy: a dense gradient handed to a sparse collective as it is.
func DenseSparseVector[T Float](values []T) *SparseVector[T] {
	return sparse.NewDense(values)
}
