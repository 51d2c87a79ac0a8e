package collectives

import (
	"math"
	"math/bits"
	"slices"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// spSupports answers how many entries ranks hold where. The schedule of
// each algorithm is written once against it and fed either an estimate
// (from entry counts alone, for AlgoAuto) or the real supports (exact
// bytes, for tests and benchmarks).
type spSupports interface {
	// count is the number of entries of rank r's input in [lo, hi).
	count(r, lo, hi int) float64
	// union is the number of distinct indices in [lo, hi) held by at least
	// one of ranks.
	union(ranks []int, lo, hi int) float64
	// indexBytes is the size of the compressed index stream
	// (quant.EncodeIndices, IndexAuto) of that union, rebased to lo.
	indexBytes(ranks []int, lo, hi int) float64
}

// spUniform estimates with independent, uniformly spread supports: rank r
// holds nnz[r]*(hi-lo)/dim entries of [lo, hi), and an index is in the
// union unless every rank misses it.
type spUniform struct {
	nnz []int
	dim int
	// indexMemo holds index stream estimates by whole entries and
	// positions: the scatter to owners prices P^2 messages of a few
	// distinct sizes, and spIndexBytesEstimate on each made AlgoAuto's
	// choice take seconds at 1024 ranks (go test -bench ChooseSparse
	// ./collectives/).
	indexMemo map[[2]int]float64
	// allMiss is the chance that every rank misses an index: the union of
	// all ranks, which ssar-split's allgather prices for each of the P
	// ranges, in O(1).
	allMiss float64
}

func newSpUniform(nnz []int, dim int) spUniform {
	u := spUniform{nnz: nnz, dim: dim, indexMemo: map[[2]int]float64{}}
	u.allMiss = u.miss(spAllRanks(len(nnz)))
	return u
}

func (u spUniform) count(r, lo, hi int) float64 {
	if u.dim == 0 {
		return 0
	}
	return float64(u.nnz[r]) * float64(hi-lo) / float64(u.dim)
}

// union is over distinct ranks, so len(u.nnz) of them are all.
func (u spUniform) union(ranks []int, lo, hi int) float64 {
	if u.dim == 0 {
		return 0
	}
	miss := u.allMiss
	if len(ranks) != len(u.nnz) {
		miss = u.miss(ranks)
	}
	return float64(hi-lo) * (1 - miss)
}

// miss is the chance that an index is held by none of ranks.
func (u spUniform) miss(ranks []int) float64 {
	miss := 1.0
	for _, r := range ranks {
		miss *= 1 - float64(u.nnz[r])/float64(u.dim)
	}
	return miss
}

// indexBytes estimates for the union rounded to whole entries, the
// estimate of a count that the memo keeps.
func (u spUniform) indexBytes(ranks []int, lo, hi int) float64 {
	key := [2]int{int(math.Round(u.union(ranks, lo, hi))), hi - lo}
	if b, ok := u.indexMemo[key]; ok {
		return b
	}
	b := spIndexBytesEstimate(float64(key[0]), key[1])
	if u.indexMemo != nil {
		u.indexMemo[key] = b
	}
	return b
}

// spIndexBytesEstimate is the expected size of the index stream of k
// indices spread uniformly at random over n positions. The stored gaps
// (distance minus one) are then close to independent geometric variables,
// P(gap >= m) = (1-d)^m with d = k/n, which gives in closed form the
// expected bytes of a varint gap (1 plus the chance of passing each 7-bit
// boundary) and the expected bit width of a bit-packed block of 128 gaps
// (the sum over j of P(largest gap >= 2^j)); the stream takes the
// smaller of the two, as IndexAuto does.
func spIndexBytesEstimate(k float64, n int) float64 {
	if k < 0.5 || n <= 0 {
		return 2 // method and a zero count
	}
	d := min(k/float64(n), 1)
	header := float64(1 + spVarintLen(uint64(k)) + spVarintLen(uint64(float64(n)/(k+1))))
	gaps := max(k-1, 0)
	if gaps == 0 {
		return header
	}
	// tail[j] = P(gap >= 2^j) = (1-d)^(2^j), by repeated squaring: the
	// model runs this for every message of every candidate schedule on
	// each AlgoAuto call, where math.Pow made it most of the choice's
	// time (BenchmarkChooseSparse).
	var tail [32]float64
	tail[0] = 1 - d
	for j := 1; j < len(tail); j++ {
		tail[j] = tail[j-1] * tail[j-1]
	}
	varint := 1 + tail[7] + tail[14] + tail[21] + tail[28]
	block := min(gaps, quant.IndexBlockSize)
	width := 0.0
	for _, t := range tail {
		if t == 0 {
			break // and every later term
		}
		width += 1 - spPowBlock(1-t, block)
	}
	bitpack := width/8 + 1/block // plus one width byte per block
	return header + gaps*min(varint, bitpack)
}

// spPowBlock is x^block for spIndexBytesEstimate: 7 squarings for the
// full blocks of 128 gaps (quant.IndexBlockSize) that almost every
// estimate has, math.Pow for any other length.
func spPowBlock(x, block float64) float64 {
	if block != 1<<7 {
		return math.Pow(x, block)
	}
	for range 7 {
		x *= x
	}
	return x
}

// spVarintLen is the length of v as a LEB128 varint.
func spVarintLen(v uint64) int { return max(1, (bits.Len64(v)+6)/7) }

// spExact counts on the real supports (nil with dense[r] for a dense input).
type spExact struct {
	idx   [][]uint32
	dense []bool
}

func (e spExact) count(r, lo, hi int) float64 {
	if e.dense[r] {
		return float64(hi - lo)
	}
	return float64(sparse.LowerBound(e.idx[r], hi) - sparse.LowerBound(e.idx[r], lo))
}

func (e spExact) union(ranks []int, lo, hi int) float64 {
	var all []uint32
	for _, r := range ranks {
		if e.dense[r] {
			return float64(hi - lo)
		}
		s := e.idx[r]
		all = append(all, s[sparse.LowerBound(s, lo):sparse.LowerBound(s, hi)]...)
	}
	slices.Sort(all)
	return float64(len(slices.Compact(all)))
}

func (e spExact) indexBytes(ranks []int, lo, hi int) float64 {
	var all []uint32
	for _, r := range ranks {
		if e.dense[r] {
			all = all[:0]
			for i := lo; i < hi; i++ {
				all = append(all, uint32(i-lo))
			}
			break
		}
		s := e.idx[r]
		for _, x := range s[sparse.LowerBound(s, lo):sparse.LowerBound(s, hi)] {
			all = append(all, x-uint32(lo))
		}
	}
	slices.Sort(all)
	n, err := quant.IndicesSize(slices.Compact(all), quant.IndexAuto)
	if err != nil {
		return math.Inf(1) // unsorted input: SparseAllreduce refuses it
	}
	return float64(n)
}
