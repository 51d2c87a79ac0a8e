package main

// #include "capi.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/sparse"
)

// width is 0 for an element vector, else the row width of a row-sparse
// one (dim rows, nnz rows stored, nnz*width values), whose result is
// always sparse rows.
//
//export sparcmlGoSparseAllreduce
func sparcmlGoSparseAllreduce(p *C.sparcml_comm, dim C.uint64_t, width C.size_t, nnz C.size_t, indices *C.uint32_t, values unsafe.Pointer,
	dtype C.int, denseOut unsafe.Pointer, result *C.sparcml_result, req **C.sparcml_request) (status C.int) {
	const op = "sparse-allreduce"
	defer guard(&status, op)
	k, status := newCall(p, op, req)
	if k == nil {
		return status
	}
	esize := elemSize(dtype)
	if esize == 0 {
		return k.invalid("unknown dtype %d (want SPARCML_FLOAT32 or SPARCML_FLOAT64)", int(dtype))
	}
	if uint64(dim) > sparse.MaxDim {
		return k.invalid("dimension %d exceeds 2^32", uint64(dim))
	}
	if width > sparse.MaxBlock || uint64(dim)*uint64(max(width, 1)) > 1<<40 {
		return k.invalid("%d rows of width %d: the width must be at most %d and rows*width at most 2^40", uint64(dim), uint64(width), sparse.MaxBlock)
	}
	b := max(int(width), 1)
	if uint64(nnz) > uint64(dim) {
		return k.invalid("%d rows stored of %d", uint64(nnz), uint64(dim))
	}
	nv, ok := k.checkBuf("values", values, nnz*C.size_t(b), esize)
	if !ok {
		return statusInvalid
	}
	n := nv / b
	if indices == nil && n > 0 {
		return k.invalid("indices is NULL (nnz %d)", n)
	}
	if result == nil && denseOut == nil && dim > 0 {
		return k.invalid("dense_out is NULL (dim %d)", uint64(dim))
	}
	if result != nil {
		if result.busy != 0 {
			return k.invalid("the result is in use by a pending request")
		}
		// A failed call leaves the result empty, not half written.
		result.busy, result.dim, result.nnz, result.dense, result.width = 1, 0, 0, 0, 1
		k.onRelease(func() { result.busy = 0 })
	}
	idx := unsafe.Slice((*uint32)(unsafe.Pointer(indices)), n)
	if esize == 4 {
		in := &sparcml.SparseVector[float32]{Dim: int(dim), Block: int(width), Indices: idx, Values: unsafe.Slice((*float32)(values), nv)}
		return sparseAllreduce(k, in, denseOut, result)
	}
	in := &sparcml.SparseVector[float64]{Dim: int(dim), Block: int(width), Indices: idx, Values: unsafe.Slice((*float64)(values), nv)}
	return sparseAllreduce(k, in, denseOut, result)
}

// sparseAllreduce runs or starts the sparse allreduce of in, its sum
// written into denseOut (dense, in place) or into result.
func sparseAllreduce[T sparcml.Float](k *call, in *sparcml.SparseVector[T], denseOut unsafe.Pointer, result *C.sparcml_result) C.int {
	ctx := k.ctx
	var out *sparcml.SparseVector[T]
	var opts []sparcml.CallOption
	var after func() error
	if result != nil {
		out = resultVector[T](result)
		after = func() error {
			if in.IsBlock() {
				out.Sparsify() // rows, never a matrix (sparcml_sparse_allreduce_rows)
			}
			return fillResult(result, out)
		}
	} else {
		dst := unsafe.Slice((*T)(denseOut), in.Dim)
		out = &sparcml.SparseVector[T]{Values: dst[:0]}
		opts = append(opts, sparcml.WithDenseOutput())
		after = func() error { return copyDense(dst, out) }
	}
	return k.finish(
		func() error {
			_, err := sparcml.SparseAllreduce(ctx, k.comm, in, out, sparcml.Sum, opts...)
			return err
		},
		func() *sparcml.Request {
			return sparcml.StartSparseAllreduce(ctx, k.comm, in, out, sparcml.Sum, opts...)
		},
		after)
}

// copyDense makes sure the dense sum is in dst. The library writes into
// the output's buffer when it is large enough, as dst is, so this only
// checks; a copy is the fallback should it ever answer elsewhere.
func copyDense[T sparcml.Float](dst []T, out *sparcml.SparseVector[T]) error {
	if !out.Dense || len(out.Values) != len(dst) {
		return fmt.Errorf("%w: sparse allreduce returned %d values (dense %v) for a dense output of %d", errInternal, len(out.Values), out.Dense, len(dst))
	}
	if len(dst) > 0 && &out.Values[0] != &dst[0] {
		copy(dst, out.Values)
	}
	return nil
}

// resultVector is an output vector over result's C arrays, so that the
// library writes the sum straight into them when they are large enough.
func resultVector[T sparcml.Float](result *C.sparcml_result) *sparcml.SparseVector[T] {
	var z T
	v := &sparcml.SparseVector[T]{}
	if result.indices != nil {
		v.Indices = unsafe.Slice((*uint32)(unsafe.Pointer(result.indices)), int(result.indices_cap))[:0]
	}
	if result.values != nil {
		v.Values = unsafe.Slice((*T)(result.values), int(result.values_cap)/int(unsafe.Sizeof(z)))[:0]
	}
	return v
}

// fillResult describes out in result, first moving its arrays into
// result's C memory if the library had to grow them on the Go heap.
func fillResult[T sparcml.Float](result *C.sparcml_result, out *sparcml.SparseVector[T]) error {
	var z T
	esize := int(unsafe.Sizeof(z))
	if !out.Dense && len(out.Indices) > 0 && !sameArray(out.Indices, result.indices) {
		p := C.realloc(unsafe.Pointer(result.indices), C.size_t(grown(len(out.Indices))*4))
		if p == nil {
			return fmt.Errorf("%w: result of %d indices", errNoMem, len(out.Indices))
		}
		result.indices, result.indices_cap = (*C.uint32_t)(p), C.size_t(grown(len(out.Indices)))
		copy(unsafe.Slice((*uint32)(p), len(out.Indices)), out.Indices)
	}
	if len(out.Values) > 0 && unsafe.Pointer(&out.Values[0]) != result.values {
		bytes := grown(len(out.Values)) * esize
		p := C.realloc(result.values, C.size_t(bytes))
		if p == nil {
			return fmt.Errorf("%w: result of %d values", errNoMem, len(out.Values))
		}
		result.values, result.values_cap = p, C.size_t(bytes)
		copy(unsafe.Slice((*T)(p), len(out.Values)), out.Values)
	}
	result.dim = C.uint64_t(out.Dim)
	result.width = C.size_t(out.BlockLen())
	result.nnz = C.size_t(out.NNZ())
	result.dense = 0
	if out.Dense {
		result.dense = 1
	}
	result.dtype = C.SPARCML_FLOAT32
	if esize == 8 {
		result.dtype = C.SPARCML_FLOAT64
	}
	return nil
}

func sameArray(s []uint32, p *C.uint32_t) bool {
	return unsafe.Pointer(&s[0]) == unsafe.Pointer(p)
}

// grown is the capacity a result array is reallocated to: a quarter more
// than needed, so that results growing slowly over a training run do not
// reallocate at every step.
func grown(n int) int { return n + n/4 }
