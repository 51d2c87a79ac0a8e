package collectives

import (
	"math"
	"slices"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// The sparse allreduce's cost model. Each algorithm's schedule is written
// once, beside the algorithm (a plan function walking its phases and
// messages), against spSupports, which says how many entries ranks hold
// where: an estimate from the entry counts alone for AlgoAuto
// (spUniform) or the real supports for exact byte counts (spExact,
// costmodel_sparse_supports.go). spWire sizes every message as it travels
// (exact values, or a lossy codec with compressed indices) and spPlan
// charges every phase its slowest rank. The choice among the algorithms
// is in costmodel_sparse_choice.go.

// SparsePrediction is what a sparse allreduce algorithm costs: the payload
// bytes and messages each rank sends, and the modelled time. Every phase is
// charged its slowest rank: rounds*Latency + messages*(Alpha-Latency) +
// max(bytes sent, bytes received)*Beta + bytes reduced*Gamma, a round
// being messages posted together (CostModel.Latency).
type SparsePrediction struct {
	Algo      Algo
	BytesSent []int64
	MsgsSent  []int
	Seconds   float64
}

// spMsgBytes is the size of an encoded vector of n positions holding nnz
// entries of s bytes in the smaller form behind a header of hdr bytes:
// sparse.CompactSize, on a possibly fractional estimate.
func spMsgBytes(nnz float64, n, s, hdr int) float64 {
	sparseBytes := nnz * float64(sparse.IndexSize+s)
	denseBytes := float64(n * s)
	if sparseBytes >= denseBytes {
		return float64(hdr) + denseBytes
	}
	return float64(hdr) + sparseBytes
}

// spWire is how entries travel: exact values of s bytes in the version-1
// encoding, or with packed indices (sparse.AppendEncodeRangePacked), or
// with a lossy codec values in the codec's stream and indices compressed
// (sparse.QuantCoder).
type spWire struct {
	s      int        // value size in memory, and on the wire when exact (a row's for a block vector)
	hdr    int        // header of an exact message: version 1's, or the block encoding's
	kind   quant.Kind // quant.None: exact
	bucket int        // of the stochastic kinds
	// packed: exact values, the indices of a sparse message packed when
	// that is the smallest form; idxSec is the index codec's time per
	// index on each side (half of CostModel.IndexCodec).
	packed bool
	idxSec float64
}

// packedWith is w (exact) with packed indices at m's codec speed.
func (w spWire) packedWith(m CostModel) spWire {
	w.packed, w.idxSec = true, m.indexCodec()/2
	return w
}

// packs says whether a message of nnz entries of an n-position range whose
// index stream takes idx bytes goes in the packed-index form: only from a
// sparse vector in memory, and only when that is the smallest exact form
// (the comparison of sparse.AppendEncodeRangePacked).
func (w spWire) packs(nnz float64, n int, idx float64, memDense bool) bool {
	return w.packed && !memDense && float64(sparse.PackedHeaderSize)+nnz*float64(w.s)+idx < spMsgBytes(nnz, n, w.s, w.hdr)
}

// codecSecs is the index codec's time on each side for such a message (0
// unless it packs).
func (w spWire) codecSecs(nnz float64, n int, idx float64, memDense bool) float64 {
	if !w.packs(nnz, n, idx, memDense) {
		return 0
	}
	return nnz * w.idxSec
}

func spWireOf[T Float](kind quant.Kind) spWire {
	return spWireFor(sparse.ValueSize[T](), kind)
}

// spWireOfVector is spWireOf for v's value type and entries: a block
// vector's rows travel as values of EntrySize bytes behind the block
// header.
func spWireOfVector[T Float](v *sparse.Vector[T], kind quant.Kind) spWire {
	w := spWireFor(v.EntrySize(), kind)
	if v.IsBlock() {
		w.hdr = sparse.BlockHeaderSize
	}
	return w
}

func spWireFor(valueSize int, kind quant.Kind) spWire {
	w := spWire{s: valueSize, hdr: sparse.HeaderSize, kind: kind}
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
		if w.packs(nnz, n, idx, memDense) {
			return float64(sparse.PackedHeaderSize) + nnz*float64(w.s) + idx, false
		}
		b := spMsgBytes(nnz, n, w.s, w.hdr)
		return b, b == float64(w.hdr+n*w.s)
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
// exact values that is its wire size b (header included), the raw
// encoding's for a packed one (its index codec is charged apart, see
// codecSecs); a lossy
// message is several times smaller on the wire than the entries it
// carries, and its codec (quantization, index compression and their
// inverses) works per entry, so it is charged per entry in memory.
func (w spWire) mem(nnz float64, n int, b float64, dense bool) float64 {
	if !w.lossy() {
		if w.packed && !dense {
			return spMsgBytes(nnz, n, w.s, w.hdr)
		}
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
	codec            []float64 // seconds of index packing of the phase (spWire.codecSecs)
	totalSent        []float64
	msgs             []int
	seconds          float64
	phaseMsgs        []int
	rounds           int  // of the current phase, one after the other (0: one)
	raw              bool // the current phase moves dense arrays in place
}

func newSpPlan(m CostModel, p int) *spPlan {
	return &spPlan{m: m, sent: make([]float64, p), recv: make([]float64, p), red: make([]float64, p),
		memSent: make([]float64, p), memRecv: make([]float64, p), codec: make([]float64, p),
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

// indexCodec charges the sender and the receiver of a packed message the
// index codec's secs each.
func (pl *spPlan) indexCodec(from, to int, secs float64) {
	pl.codec[from] += secs
	pl.codec[to] += secs
}

// mergePasses is how many times sparse.SumAll of parts vectors holding
// k entries in all, spread over n positions, handles each entry: once in
// its windowed kernel (sparse.SumsInWindows), log2(parts) times in a merge
// (one compare per entry for two parts, a tournament for more;
// BenchmarkSumKernels in sparse/ measures both).
func mergePasses(k float64, n, parts int) float64 {
	if sparse.SumsInWindows(parts, int(k), n) {
		return 1
	}
	return math.Log2(float64(parts))
}

// sparseMergeFactor is how much more a byte costs to reduce by merging
// sorted (index, value) streams than by adding dense arrays, the default
// of SparseGamma when it is not calibrated. Benchmarks: the merge kernels'
// (go test -bench . ./sparse/) against the dense add's (go test -bench
// ReduceInto ./collectives/); figures in docs/DEFAULTS.md, "Sparse-sum
// kernels".
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
	latency := float64(max(pl.rounds, 1)) * pl.m.latency()
	pl.rounds = 0
	for r := range pl.sent {
		t := pl.msgTime(latency, pl.phaseMsgs[r]) + max(pl.sent[r], pl.recv[r])*pl.m.Beta + pl.red[r]*pl.m.sparseGamma() + (pl.memSent[r]+pl.memRecv[r])*pl.m.Gamma*codec + pl.codec[r]
		worst = max(worst, t)
		pl.totalSent[r] += pl.sent[r]
		pl.msgs[r] += pl.phaseMsgs[r]
		pl.sent[r], pl.recv[r], pl.red[r], pl.phaseMsgs[r] = 0, 0, 0, 0
		pl.memSent[r], pl.memRecv[r], pl.codec[r] = 0, 0, 0
	}
	pl.seconds += worst
}

// msgTime is the latency and per-message time of a rank that sends msgs
// messages in a phase whose rounds take latency: none when it sends
// nothing.
func (pl *spPlan) msgTime(latency float64, msgs int) float64 {
	if msgs == 0 {
		return 0
	}
	return latency + float64(msgs)*pl.m.perMessage()
}

func (pl *spPlan) result(a Algo) SparsePrediction {
	out := SparsePrediction{Algo: a, BytesSent: make([]int64, len(pl.totalSent)), MsgsSent: pl.msgs, Seconds: pl.seconds}
	for r, b := range pl.totalSent {
		out.BytesSent[r] = int64(math.Round(b))
	}
	return out
}

// spPredict is the schedule of algorithm a over p ranks, dimension dim,
// entries sent as w says, range bounds for the split algorithms (nil or
// of the wrong length: equal ranges). Each algorithm's schedule sits
// beside the algorithm: planSSARRecursiveDoubling (sparse_ssar_rd.go),
// planSSARSplitAllgather (sparse_ssar_split.go), planDSAR (sparse_dsar.go)
// and planSparseAllgather (sparse_allgather.go).
func spPredict(m CostModel, a Algo, p, dim int, w spWire, sup spSupports, bounds []int) SparsePrediction {
	pl := newSpPlan(m, p)
	if w.lossy() && a == AlgoSSARRecursiveDoubling {
		pl.seconds = math.Inf(1) // refused: it would re-quantize every round
		return pl.result(a)
	}
	if p <= 1 {
		return pl.result(a)
	}
	if (a == AlgoSSARSplitAllgather || a == AlgoDSAR) && len(bounds) != p+1 {
		bounds = spEqualBounds(dim, p)
	}
	switch a {
	case AlgoSSARRecursiveDoubling:
		planSSARRecursiveDoubling(pl, p, dim, w, sup)
	case AlgoSSARSplitAllgather:
		planSSARSplitAllgather(pl, p, dim, w, sup, bounds)
	case AlgoDSAR:
		planDSAR(pl, p, w, sup, bounds)
	case AlgoSparseAllgather:
		planSparseAllgather(pl, p, dim, w, sup)
	default:
		pl.seconds = math.Inf(1)
	}
	return pl.result(a)
}

// spAllRanks returns 0, 1, ..., p-1: the group whose union is the result.
func spAllRanks(p int) []int {
	all := make([]int, p)
	for r := range all {
		all[r] = r
	}
	return all
}

// spIdx is the index stream size of a union for a lossy or packed wire
// (the raw encoding does not need it).
func spIdx(w spWire, sup spSupports, ranks []int, lo, hi int) float64 {
	if !w.lossy() && !w.packed {
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

// PredictSparsePacked is PredictSparse with the indices of sparse
// messages packed losslessly (IndexPacked): each message sized by the
// expected index stream, the smallest exact form, and its entries charged
// the index codec (IndexCodec) on both sides.
func (m CostModel) PredictSparsePacked(a Algo, p, dim, valueSize int, nnz []int) SparsePrediction {
	return spPredict(m, a, p, dim, spWireFor(valueSize, quant.None).packedWith(m), newSpUniform(nnz, dim), nil)
}

// PredictSparseQuant is PredictSparse with values sent in codec kind (see
// SparseOptions.Quant): value bytes from the codec's stream size, index
// bytes from the expected size of the compressed index stream of
// uniformly spread indices. AlgoSSARRecursiveDoubling costs +Inf under a
// lossy kind, which SparseAllreduce refuses.
func (m CostModel) PredictSparseQuant(a Algo, p, dim, valueSize int, kind quant.Kind, nnz []int) SparsePrediction {
	return spPredict(m, a, p, dim, spWireFor(valueSize, kind), newSpUniform(nnz, dim), nil)
}

// PredictSparseExact returns the exact payload bytes and messages every
// rank sends when SparseAllreduce runs algorithm a (SparseStats.Algo) with
// opts on inputs (inputs[r] is rank r's), the counts exchange included when
// opts asks for it. With a lossy opts.Quant it computes the compressed
// index streams of the real supports and the codec's stream sizes, so it
// stays exact, and so it does with packed indices (opts.Indices, resolved
// as SparseAllreduce resolves it; with IndexAuto, a forced algorithm and
// equal ranges every rank chooses from its own count, and the prediction
// takes rank 0's choice for all). bounds are SparseStats.Bounds (nil for
// equal ranges).
// Benchmarks compare it with the transport's counters.
func PredictSparseExact[T Float](m CostModel, a Algo, inputs []*sparse.Vector[T], opts SparseOptions, bounds []int) SparsePrediction {
	p := len(inputs)
	if p == 0 {
		return SparsePrediction{Algo: a}
	}
	dim := inputs[0].Dim
	if inputs[0].IsBlock() {
		opts.Indices = IndexRaw // as SparseAllreduce sends rows
	}
	ex := spExact{idx: make([][]uint32, p), dense: make([]bool, p)}
	for r, v := range inputs {
		ex.idx[r], ex.dense[r] = v.Indices, v.Dense
	}
	var pred SparsePrediction
	if isAllreduceAlgo(a) {
		// The dense end of the switch: a dense allreduce of dim values.
		vs := inputs[0].EntrySize()
		pred = SparsePrediction{Algo: a, BytesSent: make([]int64, p), MsgsSent: make([]int, p)}
		pred.Seconds, _ = m.PredictAllreduce(a, dim*vs, p)
		for r := range p {
			pred.BytesSent[r] = AllreduceBytesSent(a, dim, vs, p, r)
		}
	} else {
		var agreed []int
		if spAgrees(opts) {
			agreed = make([]int, p)
			for r, v := range inputs {
				agreed[r] = v.NNZ()
			}
		}
		w := spChooseWire(m, opts, a, p, dim, inputs[0].NNZ(), spWireOfVector(inputs[0], opts.Quant), agreed)
		pred = spPredict(m, a, p, dim, w, ex, bounds)
	}
	if p > 1 && spAgrees(opts) {
		size := make([]int64, p)
		for r, v := range inputs {
			size[r] = spAgreeHeader
			if v.NNZ() > 0 { // and its index samples (agree)
				size[r] += 4 * int64(spSampleCount(p, dim, v.NNZ()))
			}
		}
		bytes, msgs := spAgreeBytesSent(size, spDirectAgree(opts.Model, p))
		for r := range p {
			pred.BytesSent[r] += bytes[r]
			pred.MsgsSent[r] += msgs[r]
		}
		if spMayCarry(opts.Model, opts, p) {
			spAddCarried(&pred, m, opts, inputs, ex, bounds)
		}
	}
	return pred
}

// spAddCarried adds to pred, PredictSparseExact's for inputs ex, what the
// carrying counts exchange changes (sparse_agree_carry.go): the slices
// each carrying rank sends with its records, and, when every rank carries
// and pred's algorithm runs on equal ranges, the scatter those slices
// were, which the algorithm then does not send.
func spAddCarried[T Float](pred *SparsePrediction, m CostModel, opts SparseOptions, inputs []*sparse.Vector[T], ex spExact, bounds []int) {
	p, dim := len(inputs), inputs[0].Dim
	nnz := make([]int, p)
	for r, v := range inputs {
		nnz[r] = v.NNZ()
	}
	w := spWireOfVector(inputs[0], quant.None)
	carried, all := spCarriedSent(opts.Model, opts, inputs, w.hdr)
	eq := spEqualBounds(dim, p)
	var scatter []float64
	if all && isSplitAlgo(pred.Algo) && (bounds == nil || slices.Equal(bounds, eq)) {
		w = spChooseWire(m, opts, pred.Algo, p, dim, nnz[0], w, nnz)
		scatter = spScatterSent(m, p, w, ex, eq)
	}
	for r := range p {
		pred.BytesSent[r] += int64(math.Round(carried[r]))
		if scatter != nil {
			pred.BytesSent[r] -= int64(math.Round(scatter[r]))
			pred.MsgsSent[r] -= p - 1
		}
	}
}
