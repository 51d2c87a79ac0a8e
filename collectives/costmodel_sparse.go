package collectives

import (
	"math"
	"math/bits"
	"slices"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// SparsePrediction is what a sparse allreduce algorithm costs: the payload
// bytes and messages each rank sends, and the modelled time. Every phase is
// charged its slowest rank: messages*Alpha + max(bytes sent, bytes
// received)*Beta + bytes reduced*Gamma.
type SparsePrediction struct {
	Algo      Algo
	BytesSent []int64
	MsgsSent  []int
	Seconds   float64
}

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
}

func (u spUniform) count(r, lo, hi int) float64 {
	if u.dim == 0 {
		return 0
	}
	return float64(u.nnz[r]) * float64(hi-lo) / float64(u.dim)
}

func (u spUniform) union(ranks []int, lo, hi int) float64 {
	if u.dim == 0 {
		return 0
	}
	miss := 1.0
	for _, r := range ranks {
		miss *= 1 - float64(u.nnz[r])/float64(u.dim)
	}
	return float64(hi-lo) * (1 - miss)
}

func (u spUniform) indexBytes(ranks []int, lo, hi int) float64 {
	return spIndexBytesEstimate(u.union(ranks, lo, hi), hi-lo)
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
	tail := func(m float64) float64 { return math.Pow(1-d, m) }
	header := float64(1 + spVarintLen(uint64(k)) + spVarintLen(uint64(float64(n)/(k+1))))
	gaps := max(k-1, 0)
	if gaps == 0 {
		return header
	}
	varint := 1 + tail(1<<7) + tail(1<<14) + tail(1<<21) + tail(1<<28)
	block := min(gaps, quant.IndexBlockSize)
	width := 0.0
	for j := range 32 {
		width += 1 - math.Pow(1-tail(float64(uint64(1)<<j)), block)
	}
	bitpack := width/8 + 1/block // plus one width byte per block
	return header + gaps*min(varint, bitpack)
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

// spMsgBytes is the size of an encoded vector of n positions holding nnz
// entries in the smaller form: sparse.CompactSize, on a possibly
// fractional estimate.
func spMsgBytes(nnz float64, n, s int) float64 {
	sparseBytes := nnz * float64(sparse.IndexSize+s)
	denseBytes := float64(n * s)
	if sparseBytes >= denseBytes {
		return sparse.HeaderSize + denseBytes
	}
	return sparse.HeaderSize + sparseBytes
}

// spWire is how entries travel: exact values of s bytes in the version-1
// encoding, or with a lossy codec values in the codec's stream and
// indices compressed (sparse.QuantCoder).
type spWire struct {
	s      int        // value size in memory, and on the wire when exact
	kind   quant.Kind // quant.None: exact
	bucket int        // of the stochastic kinds
}

func spWireOf[T Float](kind quant.Kind) spWire {
	return spWireFor(sparse.ValueSize[T](), kind)
}

func spWireFor(valueSize int, kind quant.Kind) spWire {
	w := spWire{s: valueSize, kind: kind}
	if kind.Stochastic() {
		w.bucket = quant.DefaultBucketSize
	}
	return w
}

func (w spWire) lossy() bool { return !w.kind.Lossless() }

// values is the size of the value stream of n (rounded) values.
func (w spWire) values(n float64) float64 {
	return float64(sparse.QuantValueBytes(w.kind, w.bucket, uint64(math.Round(max(n, 0)))))
}

// msg is the size of the encoding of a range of n positions holding nnz
// stored entries, and whether it goes dense. Exact values: spMsgBytes.
// Lossy: dense when the range is dense in memory, else by the same
// comparison as sparse.AppendEncodeRangeQuant, idx being the size of the
// index stream.
func (w spWire) msg(nnz float64, n int, idx float64, memDense bool) (float64, bool) {
	if !w.lossy() {
		b := spMsgBytes(nnz, n, w.s)
		return b, b == sparse.HeaderSize+float64(n*w.s)
	}
	dense := sparse.QuantHeaderSize + w.values(float64(n))
	if memDense || w.values(nnz)+idx >= w.values(float64(n)) {
		return dense, true
	}
	return sparse.QuantHeaderSize + w.values(nnz) + idx, false
}

// mem is what a message of nnz entries of an n-position range, sent in
// the form dense says, is in memory once decoded: the bytes its encoder
// reads and its decoder writes, and those the receiver reduces. With
// exact values that is its wire size b (header included, as before); a
// lossy message is several times smaller on the wire than the entries it
// carries, and its codec (quantization, index compression and their
// inverses) works per entry, so it is charged per entry in memory.
func (w spWire) mem(nnz float64, n int, b float64, dense bool) float64 {
	if !w.lossy() {
		return b
	}
	if dense {
		return float64(n * w.s)
	}
	return nnz * float64(sparse.IndexSize+w.s)
}

// spPlan accumulates a prediction phase by phase.
type spPlan struct {
	m                CostModel
	sent, recv, red  []float64 // of the current phase
	memSent, memRecv []float64 // in-memory bytes of the phase's messages (spWire.mem)
	totalSent        []float64
	msgs             []int
	seconds          float64
	phaseMsgs        []int
	raw              bool // the current phase moves dense arrays in place
}

func newSpPlan(m CostModel, p int) *spPlan {
	return &spPlan{m: m, sent: make([]float64, p), recv: make([]float64, p), red: make([]float64, p),
		memSent: make([]float64, p), memRecv: make([]float64, p),
		totalSent: make([]float64, p), msgs: make([]int, p), phaseMsgs: make([]int, p)}
}

// msg records a message of b bytes on the wire from one rank to another,
// mem bytes in memory (spWire.mem), which the receiver reduces
// reduceFactor times (0: not at all).
func (pl *spPlan) msg(from, to int, b, mem, reduceFactor float64) {
	pl.sent[from] += b
	pl.recv[to] += b
	pl.memSent[from] += mem
	pl.memRecv[to] += mem
	pl.phaseMsgs[from]++
	pl.red[to] += mem * reduceFactor
}

// mergePasses is how many times sparse.SumAll of parts vectors holding
// k entries in all, spread over n positions, handles each entry: once in
// its windowed kernel (from one entry per 256 positions), log2(parts)
// times in a merge below that.
func mergePasses(k float64, n, parts int) float64 {
	if k >= float64(n>>8) {
		return 1
	}
	return math.Log2(float64(parts))
}

// sparseMergeFactor is how much more a byte costs to reduce by merging
// sorted (index, value) streams than by adding dense arrays: the kernels'
// benchmarks (go test -bench . ./sparse/) measure a two-way merge at 2-7 ns
// per 8-byte entry against about 0.2 ns per byte for a dense add.
const sparseMergeFactor = 4

// sparseCodecFactor charges every byte a sparse message carries for being
// encoded on one side and decoded on the other (copies the dense
// algorithms avoid by receiving straight into place), in units of Gamma.
const sparseCodecFactor = 2

// endPhase charges the phase its slowest rank and starts the next.
func (pl *spPlan) endPhase() {
	worst := 0.0
	codec := float64(sparseCodecFactor)
	if pl.raw {
		codec, pl.raw = 0, false
	}
	for r := range pl.sent {
		t := float64(pl.phaseMsgs[r])*pl.m.Alpha + max(pl.sent[r], pl.recv[r])*pl.m.Beta + pl.red[r]*pl.m.sparseGamma() + (pl.memSent[r]+pl.memRecv[r])*pl.m.Gamma*codec
		worst = max(worst, t)
		pl.totalSent[r] += pl.sent[r]
		pl.msgs[r] += pl.phaseMsgs[r]
		pl.sent[r], pl.recv[r], pl.red[r], pl.phaseMsgs[r] = 0, 0, 0, 0
		pl.memSent[r], pl.memRecv[r] = 0, 0
	}
	pl.seconds += worst
}

func (pl *spPlan) result(a Algo) SparsePrediction {
	out := SparsePrediction{Algo: a, BytesSent: make([]int64, len(pl.totalSent)), MsgsSent: pl.msgs, Seconds: pl.seconds}
	for r, b := range pl.totalSent {
		out.BytesSent[r] = int64(math.Round(b))
	}
	return out
}

// denseRing adds a ring allgather of dense blocks of the given byte
// sizes, received in place (exact DSAR's last phase): rank r forwards
// every block but its right neighbour's, one message per segment (at
// least one per block), with no encoding to charge.
func (pl *spPlan) denseRing(size []float64) {
	p := len(size)
	for r := range p {
		for t := range p - 1 {
			b := size[(r-t+p)%p]
			pl.msg(r, (r+1)%p, b, b, 0)
			pl.phaseMsgs[r] += max(0, int(math.Ceil(b/segmentBytes))-1)
		}
	}
	pl.raw = true
	pl.endPhase()
}

// bruck adds the allgather of blocks of the given sizes (spAllgatherBlobs)
// and in-memory sizes (spWire.mem; nil: the same); reduceFactor > 0
// charges every received in-memory byte that many reductions.
func (pl *spPlan) bruck(size, mem []float64, reduceFactor float64) {
	p := len(size)
	if mem == nil {
		mem = size
	}
	for r := range p {
		for d := 1; d < p; d *= 2 {
			to := (r - d + p) % p
			b, m := 0.0, 0.0
			for i := range min(d, p-d) {
				b += size[(r+i)%p]
				m += mem[(r+i)%p]
			}
			pl.msg(r, to, b, m, reduceFactor)
		}
	}
	pl.endPhase()
}

// spPredict is the schedule of algorithm a over p ranks, dimension dim,
// entries sent as w says, range bounds for the split algorithms.
func spPredict(m CostModel, a Algo, p, dim int, w spWire, sup spSupports, bounds []int) SparsePrediction {
	pl := newSpPlan(m, p)
	if w.lossy() && a == AlgoSSARRecursiveDoubling {
		pl.seconds = math.Inf(1) // refused: it would re-quantize every round
		return pl.result(a)
	}
	if p <= 1 {
		return pl.result(a)
	}
	s := w.s
	all := make([]int, p)
	for r := range all {
		all[r] = r
	}
	switch a {
	case AlgoSSARRecursiveDoubling:
		g := spFold(p)
		if g.rem > 0 {
			for r := 0; r < 2*g.rem; r += 2 {
				b := spMsgBytes(sup.count(r, 0, dim), dim, s)
				pl.msg(r, r+1, b, b, 1)
			}
			pl.endPhase()
		}
		for d := 1; d < g.pof2; d *= 2 {
			for n := range g.pof2 {
				// The group whose sum newrank n holds before this round.
				var group []int
				for o := n &^ (d - 1); o < n&^(d-1)+d; o++ {
					group = append(group, g.oldRank(o))
					if o < g.rem {
						group = append(group, 2*o)
					}
				}
				b := spMsgBytes(sup.union(group, 0, dim), dim, s)
				pl.msg(g.oldRank(n), g.oldRank(n^d), b, b, 1)
			}
			pl.endPhase()
		}
		if g.rem > 0 {
			k := spMsgBytes(sup.union(all, 0, dim), dim, s)
			for r := 0; r < 2*g.rem; r += 2 {
				pl.msg(r+1, r, k, k, 0)
			}
			pl.endPhase()
		}
	case AlgoSSARSplitAllgather, AlgoDSAR:
		if len(bounds) != p+1 {
			bounds = spEqualBounds(dim, p)
		}
		// Owners sum P slices (split: sparse.SumAll, see mergePasses) or
		// scatter-add them into a dense window (DSAR: sparse.AddAllTo,
		// which costs about what a dense add does per byte, so it is
		// charged at Gamma rather than the merge's SparseGamma).
		reduce := 1.0
		if sg := m.sparseGamma(); sg > 0 {
			reduce = m.Gamma / sg
		}
		if a == AlgoSSARSplitAllgather {
			k := 0.0
			for r := range p {
				k += sup.count(r, 0, dim)
			}
			reduce = mergePasses(k, dim, p)
		}
		// A piece that travels dense arrives dense, and the owner's sum
		// of its range is then dense in memory (sparse.SumAll).
		gotDense := make([]bool, p)
		for r := range p {
			for q := range p {
				if q != r {
					n := bounds[q+1] - bounds[q]
					k := sup.count(r, bounds[q], bounds[q+1])
					b, dense := w.msg(k, n, spIdx(w, sup, []int{r}, bounds[q], bounds[q+1]), false)
					gotDense[q] = gotDense[q] || dense
					pl.msg(r, q, b, w.mem(k, n, b, dense), reduce)
				}
			}
		}
		pl.endPhase()
		size, mem := make([]float64, p), make([]float64, p)
		for q := range p {
			n := bounds[q+1] - bounds[q]
			if a == AlgoDSAR {
				size[q], _ = w.msg(float64(n), n, 0, true)
				mem[q] = w.mem(float64(n), n, size[q], true)
				if !w.lossy() {
					size[q] = float64(n * s) // raw blocks, no header (denseRing takes no mem)
				}
				continue
			}
			union := sup.union(all, bounds[q], bounds[q+1])
			memDense := gotDense[q] || sparse.PreferDense(int(math.Round(union)), n, s)
			var dense bool
			size[q], dense = w.msg(union, n, spIdx(w, sup, all, bounds[q], bounds[q+1]), memDense)
			mem[q] = w.mem(union, n, size[q], dense)
		}
		if a == AlgoDSAR && !w.lossy() {
			pl.denseRing(size)
		} else {
			pl.bruck(size, mem, 0)
		}
	case AlgoSparseAllgather:
		size, mem := make([]float64, p), make([]float64, p)
		for r := range p {
			k := sup.count(r, 0, dim)
			var dense bool
			size[r], dense = w.msg(k, dim, spIdx(w, sup, []int{r}, 0, dim), false)
			mem[r] = w.mem(k, dim, size[r], dense)
		}
		k := 0.0
		for r := range p {
			k += sup.count(r, 0, dim)
		}
		// Every rank sums all P inputs, its own included, and with a
		// lossy codec decodes its own bytes too (so that every rank sums
		// the same values): charged with the phase.
		merge := mergePasses(k, dim, p)
		for r := range p {
			pl.red[r] += mem[r] * merge
			if w.lossy() {
				pl.memRecv[r] += mem[r]
			}
		}
		pl.bruck(size, mem, merge)
	default:
		pl.seconds = math.Inf(1)
	}
	return pl.result(a)
}

// spIdx is the index stream size of a union for a lossy wire (the exact
// encoding does not need it).
func spIdx(w spWire, sup spSupports, ranks []int, lo, hi int) float64 {
	if !w.lossy() {
		return 0
	}
	return sup.indexBytes(ranks, lo, hi)
}

// PredictSparse estimates algorithm a (not AlgoAuto) on p ranks for a
// dimension-dim vector of valueSize-byte values when rank r brings nnz[r]
// entries, assuming independent uniformly spread supports (identical
// supports make the real fill-in smaller, clustered ones make one split
// owner hotter). Equal ranges are assumed for the split algorithms.
func (m CostModel) PredictSparse(a Algo, p, dim, valueSize int, nnz []int) SparsePrediction {
	return m.PredictSparseQuant(a, p, dim, valueSize, quant.None, nnz)
}

// PredictSparseQuant is PredictSparse with values sent in codec kind (see
// SparseOptions.Quant): value bytes from the codec's stream size, index
// bytes from the expected size of the compressed index stream of
// uniformly spread indices. AlgoSSARRecursiveDoubling costs +Inf under a
// lossy kind, which SparseAllreduce refuses.
func (m CostModel) PredictSparseQuant(a Algo, p, dim, valueSize int, kind quant.Kind, nnz []int) SparsePrediction {
	return spPredict(m, a, p, dim, spWireFor(valueSize, kind), spUniform{nnz: nnz, dim: dim}, nil)
}

// ChooseSparse returns the sparse allreduce algorithm PredictSparse finds
// fastest (ties to the one with fewer messages). It depends only on its
// arguments, which SparseAllreduce first makes identical on every rank,
// so every rank chooses the same.
func (m CostModel) ChooseSparse(p, dim, valueSize int, nnz []int) Algo {
	return m.chooseSparse(p, dim, spWireFor(valueSize, quant.None), nnz)
}

func (m CostModel) chooseSparse(p, dim int, w spWire, nnz []int) Algo {
	best, bestTime := AlgoSSARSplitAllgather, math.Inf(1)
	for _, a := range sparseAlgos {
		if a == AlgoSSARRecursiveDoubling && !rdFitsSparse(dim, nnz) {
			continue
		}
		if t := spPredict(m, a, p, dim, w, spUniform{nnz: nnz, dim: dim}, nil).Seconds; t < bestTime {
			best, bestTime = a, t
		}
	}
	return best
}

// rdFitsSparse says whether SSAR recursive doubling is worth considering:
// its partial results grow towards the union of every rank's support and
// each round merges them whole, so it only pays while all the entries
// together stay a small part of the dimension (SparCML: P k c << n): every
// rank encodes, merges and writes the whole growing partial each round,
// where the split algorithms handle each range once. Past 1/32 of the
// dimension that costs more than the model's per-byte charges say
// (measured on 4 ranks: 10x dense time at 10% density; at 1% per rank,
// 4% together, 28 ms against split-allgather's 14 ms), so the model is
// not asked.
func rdFitsSparse(dim int, nnz []int) bool {
	total := 0
	for _, k := range nnz {
		total += k
	}
	return total <= dim/32
}

// ChooseSparseOrDense is ChooseSparse with the dense allreduce of the
// densified vectors as one more candidate: when the inputs are dense
// enough that even the best sparse schedule (fill-in, merges, the switch
// to dense on the way) costs more than moving the whole vector, it returns
// the dense algorithm the model picks for dim values (AlgoRing,
// AlgoRabenseifner or AlgoRecursiveDoubling).
func (m CostModel) ChooseSparseOrDense(p, dim, valueSize int, nnz []int) Algo {
	return m.chooseSparseOrDense(p, dim, spWireFor(valueSize, quant.None), nnz)
}

// ChooseSparseOrDenseQuant is ChooseSparseOrDense for values sent in
// codec kind: the sparse candidates are priced at their encoded sizes
// (AlgoSSARRecursiveDoubling excluded under a lossy kind), the dense end
// at full precision, which is what SparseAllreduce runs there.
func (m CostModel) ChooseSparseOrDenseQuant(p, dim, valueSize int, kind quant.Kind, nnz []int) Algo {
	return m.chooseSparseOrDense(p, dim, spWireFor(valueSize, kind), nnz)
}

func (m CostModel) chooseSparseOrDense(p, dim int, w spWire, nnz []int) Algo {
	sparseAlgo := m.chooseSparse(p, dim, w, nnz)
	sparseTime := spPredict(m, sparseAlgo, p, dim, w, spUniform{nnz: nnz, dim: dim}, nil).Seconds
	valueSize := w.s
	bytes := dim * valueSize
	denseAlgo := m.ChooseAllreduce(bytes, p)
	denseTime := m.allreduceTime(denseAlgo, bytes, p) + float64(bytes)*m.Gamma // + densifying the input
	if expectedUnion(dim, nnz) >= denseUnionFraction {
		// Only DSAR still competes: its result is dense by design and
		// its last phase moves dense blocks in place (exact values),
		// where the other sparse schedules would push nearly dense
		// partial results through encode, decode and merges.
		if !w.lossy() && spPredict(m, AlgoDSAR, p, dim, w, spUniform{nnz: nnz, dim: dim}, nil).Seconds < denseTime {
			return AlgoDSAR
		}
		return denseAlgo
	}
	if denseTime < sparseTime {
		return denseAlgo
	}
	return sparseAlgo
}

// denseUnionFraction: when the sum is expected to fill more than a quarter
// of the dimension, only the dense allreduce and DSAR are considered. The
// other sparse schedules then move nearly dense partial results through
// encode, decode and merge passes that the dense algorithms do not have
// (measured over TCP loopback on 4 ranks at 10% density per rank: 3-10x
// slower than the dense allreduce); DSAR, whose owners add into the dense
// output and whose allgather moves dense blocks in place, measured 25-40%
// less CPU than Rabenseifner on 4 and 8 ranks at 10%.
const denseUnionFraction = 0.25

// expectedUnion is the expected fraction of the dimension covered by the
// union of independent uniformly spread supports of nnz[r] entries.
func expectedUnion(dim int, nnz []int) float64 {
	if dim == 0 {
		return 0
	}
	empty := 1.0
	for _, k := range nnz {
		empty *= 1 - math.Min(1, float64(k)/float64(dim))
	}
	return 1 - empty
}

// PredictSparseExact returns the exact payload bytes and messages every
// rank sends when SparseAllreduce runs algorithm a (SparseStats.Algo) with
// opts on inputs (inputs[r] is rank r's), the counts exchange included when
// opts asks for it. With a lossy opts.Quant it computes the compressed
// index streams of the real supports and the codec's stream sizes, so it
// stays exact. bounds are SparseStats.Bounds (nil for equal ranges).
// Benchmarks compare it with the transport's counters.
func PredictSparseExact[T Float](m CostModel, a Algo, inputs []*sparse.Vector[T], opts SparseOptions, bounds []int) SparsePrediction {
	p := len(inputs)
	if p == 0 {
		return SparsePrediction{Algo: a}
	}
	dim := inputs[0].Dim
	ex := spExact{idx: make([][]uint32, p), dense: make([]bool, p)}
	for r, v := range inputs {
		ex.idx[r], ex.dense[r] = v.Indices, v.Dense
	}
	var pred SparsePrediction
	if isAllreduceAlgo(a) {
		// The dense end of the switch: a dense allreduce of dim values.
		vs := sparse.ValueSize[T]()
		pred = SparsePrediction{Algo: a, BytesSent: make([]int64, p), MsgsSent: make([]int, p)}
		pred.Seconds, _ = m.PredictAllreduce(a, dim*vs, p)
		for r := range p {
			pred.BytesSent[r] = AllreduceBytesSent(a, dim, vs, p, r)
		}
	} else {
		pred = spPredict(m, a, p, dim, spWireOf[T](opts.Quant), ex, bounds)
	}
	if p > 1 && (opts.Algo == AlgoAuto || opts.Balanced) {
		size := make([]int64, p)
		for r, v := range inputs {
			size[r] = spAgreeHeader
			if opts.Balanced && v.NNZ() > 0 {
				size[r] += 4 * int64(spSampleCount(p))
			}
		}
		bytes, msgs := spBruckBytesSent(size)
		for r := range p {
			pred.BytesSent[r] += bytes[r]
			pred.MsgsSent[r] += msgs[r]
		}
	}
	return pred
}
