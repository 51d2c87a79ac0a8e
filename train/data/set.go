// Package data holds the training data of `sparcml train`: a shard of a
// data set held dense (images) or sparse (LIBSVM rows), the readers of the
// LIBSVM text format and of the IDX format of MNIST and Fashion-MNIST, a
// generator of URL- and webspam-like sparse data, and the sharding that
// gives each rank only its part. A rank's memory grows with its shard,
// not with the data set.
package data

import (
	"fmt"
)

// Set is one rank's shard of a data set: Len() samples of Dim features,
// held either dense (X, row-major, Len()*Dim values) or sparse in
// compressed rows (RowPtr, Idx, Val: row r's features are
// Idx[RowPtr[r]:RowPtr[r+1]], 0-based and increasing, with their values).
// Labels are class numbers in [0, Classes).
type Set struct {
	Name    string // the file or generator it came from, for messages
	Dim     int
	Classes int
	Labels  []int32

	X []float32 // dense rows, or nil

	RowPtr []int // sparse rows: len Len()+1
	Idx    []uint32
	Val    []float32

	// Pos[r] is where sample r is in its file (a byte offset, a record
	// number) and Locate turns it into "FILE:LINE" or "FILE record N",
	// for messages about the data after loading; both may be nil.
	Pos    []int64
	Locate func(pos int64) string
}

// Len is the number of samples.
func (s *Set) Len() int { return len(s.Labels) }

// Sparse reports whether the rows are held in compressed sparse form.
func (s *Set) Sparse() bool { return s.X == nil && s.RowPtr != nil }

// NNZ is the number of stored feature values.
func (s *Set) NNZ() int {
	if s.Sparse() {
		return len(s.Idx)
	}
	return len(s.X)
}

// Row returns sample r's stored features: its indices and values in
// sparse form, or (nil, the Dim values) in dense form.
func (s *Set) Row(r int) ([]uint32, []float32) {
	if s.Sparse() {
		lo, hi := s.RowPtr[r], s.RowPtr[r+1]
		return s.Idx[lo:hi], s.Val[lo:hi]
	}
	return nil, s.X[r*s.Dim : (r+1)*s.Dim]
}

// Where names sample r for a message: the file and its line or record.
func (s *Set) Where(r int) string {
	if r < len(s.Pos) && s.Locate != nil {
		return s.Locate(s.Pos[r])
	}
	return fmt.Sprintf("%s: sample %d", s.Name, r)
}

// Bytes is the memory the shard's arrays hold.
func (s *Set) Bytes() int64 {
	return int64(4*len(s.Labels) + 4*len(s.X) + 8*len(s.RowPtr) + 4*len(s.Idx) + 4*len(s.Val) + 8*len(s.Pos))
}

// Batch is a list of samples of a set, the unit a model computes a
// gradient or an evaluation on.
type Batch struct {
	Set  *Set
	Rows []int
}

// Len is the number of samples in the batch.
func (b Batch) Len() int { return len(b.Rows) }
