package collectives

import (
	"fmt"
	"slices"

	"github.com/sparcml/sparcml/sparse"
)

// IndexWire says how the exact sparse allreduce sends the indices of its
// sparse messages (SparseOptions.Indices). Lossy value codecs always
// compress their indices, whatever it says.
type IndexWire uint8

const (
	// IndexAuto lets the cost model choose per call (the zero value):
	// packed where the bytes saved at the measured Beta outweigh the
	// index codec's measured time (CostModel.IndexCodec), raw otherwise;
	// see CostModel.ChooseSparseIndices.
	IndexAuto IndexWire = iota
	// IndexRaw sends indices as uint32 arrays (sparse.AppendEncodeRange).
	IndexRaw
	// IndexPacked packs the indices of every sparse message losslessly
	// (sparse.AppendEncodeRangePacked) where that is the smallest form.
	IndexPacked
)

// String returns "auto", "raw" or "packed".
func (w IndexWire) String() string {
	switch w {
	case IndexAuto:
		return "auto"
	case IndexRaw:
		return "raw"
	case IndexPacked:
		return "packed"
	}
	return fmt.Sprintf("indexwire(%d)", uint8(w))
}

// Valid says whether w is one of the constants.
func (w IndexWire) Valid() bool { return w <= IndexPacked }

// The encoding of every message says in its version byte whether its
// indices are packed (sparse.IsPacked), and every decoder takes both, so
// the ranks need not agree on the choice: each rank makes it for what it
// sends. Under AlgoAuto or Balanced the ranks make it from the agreed
// counts and so choose alike; otherwise each assumes every rank holds as
// many entries as it does.

// spChooseWire resolves opts.Indices for a call running sparse algorithm
// algo: nnz are the agreed counts, or nil when the ranks did not exchange
// them.
func spChooseWire(m CostModel, opts SparseOptions, algo Algo, p, dim, myNNZ int, w spWire, nnz []int) spWire {
	if w.lossy() || !isSparseAlgo(algo) {
		return w
	}
	switch opts.Indices {
	case IndexRaw:
		return w
	case IndexPacked:
		return w.packedWith(m)
	}
	if nnz == nil {
		nnz = slices.Repeat([]int{myNNZ}, p)
	}
	return m.chooseWire(algo, p, dim, w, nnz)
}

// encodeExact appends v's slice [lo, hi) in the exact encoding the call
// chose: raw or packed indices.
func (c *spCall[T]) encodeExact(dst []byte, v *sparse.Vector[T], lo, hi int) ([]byte, error) {
	if c.packed {
		return v.AppendEncodeRangePacked(dst, lo, hi)
	}
	return v.AppendEncodeRange(dst, lo, hi)
}

// entryBytes is the size of the entries of parts (an index and a value
// each, a value alone when dense): what a merge or scatter-add of them
// reads, as transport.Work reports it.
func entryBytes[T Float](parts []*sparse.Vector[T]) int {
	n := 0
	for _, v := range parts {
		if v.Dense {
			n += len(v.Values) * sparse.ValueSize[T]()
		} else {
			n += v.NNZ() * (sparse.IndexSize + v.EntrySize())
		}
	}
	return n
}
