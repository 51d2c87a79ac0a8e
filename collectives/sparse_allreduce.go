package collectives

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// SparseOptions tunes SparseAllreduce. Every rank must pass the same
// Reduce, Algo, Model, Balanced and Quant (DenseOut is local to each rank). With AlgoAuto
// or Balanced the ranks exchange a small record first and check this, so a
// disagreement fails on every rank with an error naming both sides; a
// forced algorithm with equal ranges skips that exchange to save its
// latency.
type SparseOptions struct {
	// Reduce is Sum (the zero value) or Avg (the sum divided by the number
	// of ranks); Min and Max are refused (ErrInvalid).
	Reduce ReduceOp
	// Algo is AlgoSSARRecursiveDoubling, AlgoSSARSplitAllgather, AlgoDSAR,
	// AlgoSparseAllgather, or AlgoAuto to let Model choose from every
	// rank's nonzero count.
	Algo Algo
	// Model is the cost model of AlgoAuto and of the predictions in
	// SparseStats; the zero value means DefaultCostModel.
	Model CostModel
	// Balanced places the split algorithms' range boundaries at quantiles
	// of where the nonzeros are (sampled on every rank), instead of equal
	// ranges, so that an owner of a popular range is not a hot spot.
	// AlgoAuto does so for ssar-split whatever Balanced says, and keeps
	// DSAR's ranges equal unless Balanced is set (DSAR's last phase moves
	// the ranges dense, so the longest sets its time).
	Balanced bool
	// DenseOut asks for the result in dense form even when sparse is
	// smaller (the output vector's Values buffer is reused).
	DenseOut bool
	// Quant is the value codec on the wire; every rank must pass the
	// same. quant.None (the zero value) sends exact values, as before
	// the option existed. A lossy kind (FP16, BF16, Q8, Q4, Q2) sends
	// every message's values in that codec and its indices compressed
	// losslessly (sparse.QuantCoder), quantizing each contribution once
	// and each reduced range once: AlgoSSARSplitAllgather, AlgoDSAR and
	// AlgoSparseAllgather support it; AlgoSSARRecursiveDoubling, which
	// would re-quantize partial sums at every round, is refused
	// (ErrInvalid) and never chosen by AlgoAuto; the dense end of the
	// switch (AlgoRing, AlgoRabenseifner, AlgoRecursiveDoubling) stays
	// exact. With one rank nothing is quantized. The stochastic kinds use
	// buckets of quant.DefaultBucketSize values.
	Quant quant.Kind
	// QuantSeed seeds a stochastic codec's rounding. Pass a different
	// seed on every rank and every call: equal seeds make the ranks'
	// rounding noise identical, so it adds up instead of averaging out.
	QuantSeed uint64
	// Indices says how exact values' indices travel: IndexAuto (the zero
	// value) lets Model choose raw or packed, IndexRaw and IndexPacked
	// force one. Messages say in-band which they carry, so ranks may
	// pass different ones. Ignored with a lossy Quant.
	Indices IndexWire
	// Plan, from an earlier call's SparseStats.Plan, runs this call on
	// that call's decisions (algorithm, index wire, ranges) without the
	// counts exchange of AlgoAuto or Balanced; it must have been made
	// with the same dimension, value type and options, else the call
	// fails with ErrInvalid. Every rank must pass the same plan or none.
	Plan *SparsePlan
}

// SparseStats describes one SparseAllreduce on this rank.
type SparseStats struct {
	// Algo is the algorithm that ran: the model's choice under AlgoAuto,
	// never AlgoAuto itself once the call has succeeded. With one rank
	// nothing is sent and it is the forced algorithm, or AlgoDirect (the
	// input copied to the output) under AlgoAuto.
	Algo Algo
	// NNZIn and NNZOut are the stored entries of this rank's input and of
	// the result (the dimension when dense).
	NNZIn, NNZOut int
	// Agreed says the ranks exchanged their counts (AlgoAuto or Balanced);
	// TotalNNZIn and the predictions are known only then.
	Agreed     bool
	TotalNNZIn int64
	// Plan is what this call decided from the counts exchange, for later
	// calls to reuse (SparseOptions.Plan); nil when it exchanged none.
	Plan *SparsePlan
	// Reused says the call ran SparseOptions.Plan, without the exchange.
	Reused bool
	// PredictedBytes is the model's estimate of the payload bytes this
	// rank sends and PredictedSeconds of the operation's time, counts
	// exchange included (see CostModel.PredictSparse).
	PredictedBytes   int64
	PredictedSeconds float64
	// Bounds are the index ranges of the split algorithms: rank i owns
	// [Bounds[i], Bounds[i+1]). Nil for the others.
	Bounds []int
	// PackedIndices says this rank sent exact values with packed indices
	// (SparseOptions.Indices, resolved).
	PackedIndices bool
}

// Step bases of the phases of the sparse collectives: each phase has its
// own block of step numbers, so that (sender, receiver, step) never repeats
// within an operation.
const (
	spStepAgree   = 1 << 8   // counts and samples allgather, one step per round
	spStepRD      = 2 << 8   // recursive doubling rounds
	spStepFold    = 3 << 8   // non-power-of-two fold in
	spStepUnfold  = 3<<8 + 1 // and result back out
	spStepScatter = 4 << 8   // split algorithms: pieces to owners
	spStepGather  = 5 << 8   // allgather of reduced ranges or of inputs
	// DSAR's dense ring allgather numbers its segments from here up: it
	// must stay the highest block.
	spStepDenseGather = 6 << 8
)

// SparseAllreduce sums in over all ranks (or averages it, with opts.Reduce
// Avg) and leaves the result in out on every rank, bit-identical on all of
// them. Every rank must pass the same
// dimension; each may bring any number of entries, zero included. in must
// be valid (see sparse.Vector.Validate: sorted unique indices below the
// dimension): otherwise the operation fails on every rank with an error
// naming the bad position. in is not modified; out is overwritten, reusing
// its buffers, and comes back in whichever form is smaller (dense with
// opts.DenseOut, or always with AlgoDSAR).
//
// The descriptor every message carries names the reduction and the value
// codec, so ranks that pass different ones fail with ErrMismatch on every
// rank instead of misreading each other's bytes.
func SparseAllreduce[T Float](op *Op, in, out *sparse.Vector[T], opts SparseOptions) (SparseStats, error) {
	var st SparseStats
	if err := sparseCheckOp(op); err != nil {
		return st, err
	}
	op.Desc = spDesc[T](transport.OpSparseAllreduce, opts.Reduce, opts.Quant, opts.Algo)
	if opts.Reduce != Sum && opts.Reduce != Avg {
		return st, sparseFailInvalid(op, "sparse allreduce supports sum and avg, not %v", opts.Reduce)
	}
	if in == nil || out == nil || in == out {
		return st, sparseFailInvalid(op, "SparseAllreduce needs distinct non-nil input and output vectors")
	}
	op.Desc.Count = uint64(in.Dim)
	op.Desc.Root = spBlockDesc(in)
	if err := in.Validate(); err != nil {
		return st, op.Fail(fmt.Errorf("%w: input of rank %d: %w", transport.ErrInvalid, op.commRank(op.Rank()), err))
	}
	if in.IsBlock() {
		if err := spCheckBlockOptions(op, opts); err != nil {
			return st, err
		}
		opts.Indices = IndexRaw // rows travel with raw indices (sparse/block.go)
	}
	if opts.Algo == AlgoHierarchical {
		if opts.Model == (CostModel{}) {
			opts.Model = DefaultCostModel
		}
		return hierarchicalSparseAllreduce(op, in, out, opts)
	}
	if !isSparseAlgo(opts.Algo) && opts.Algo != AlgoAuto && !isAllreduceAlgo(opts.Algo) {
		return st, sparseFailInvalid(op, "%v is not a sparse or dense allreduce algorithm", opts.Algo)
	}
	if !opts.Quant.Valid() {
		return st, sparseFailInvalid(op, "unknown value codec %v", opts.Quant)
	}
	if !opts.Indices.Valid() {
		return st, sparseFailInvalid(op, "unknown index wire %v", opts.Indices)
	}
	if !opts.Quant.Lossless() && opts.Algo == AlgoSSARRecursiveDoubling {
		return st, sparseFailInvalid(op, "%v re-quantizes partial sums at every round; with the lossy codec %v use %v, %v or %v",
			opts.Algo, opts.Quant, AlgoSSARSplitAllgather, AlgoDSAR, AlgoSparseAllgather)
	}
	if opts.Model == (CostModel{}) {
		opts.Model = DefaultCostModel
	}
	c := newSpCall(op, in)
	st.NNZIn = in.NNZ()
	if c.p == 1 {
		st.Algo = algoOr(opts.Algo, AlgoDirect)
		c.finish(out, in, opts.DenseOut || opts.Algo == AlgoDSAR)
		st.NNZOut = out.NNZ()
		return st, nil
	}
	if err := c.setQuant(opts.Quant, opts.QuantSeed); err != nil {
		return st, err
	}
	pl, err := c.decide(opts, &st)
	if err != nil {
		return st, err
	}
	algo := pl.algo
	c.packed, st.PackedIndices = pl.packed, pl.packed
	c.bounds, st.Bounds = pl.bounds, pl.bounds
	st.Algo = algo
	op.Desc.Algo = uint8(algo)
	switch algo {
	case AlgoRing, AlgoRabenseifner, AlgoRecursiveDoubling:
		err = denseSparseAllreduce(op, in, out, opts.Reduce, algo)
	case AlgoSSARRecursiveDoubling:
		err = ssarRecursiveDoubling(c, out, opts.DenseOut)
	case AlgoDSAR:
		err = dsarAllreduce(c, out)
	case AlgoSSARSplitAllgather:
		err = ssarSplitAllgather(c, out, opts.DenseOut)
	case AlgoSparseAllgather:
		err = allgatherAllreduce(c, out, opts.DenseOut)
	}
	if err != nil {
		c.sc.abandon()
		return st, err
	}
	c.sc.release()
	if !isAllreduceAlgo(algo) { // the dense allreduce has averaged already
		finishReduce(opts.Reduce, out.Values, c.p)
	}
	st.NNZOut = out.NNZ()
	return st, nil
}

// spDesc is the descriptor of a sparse collective's messages: the
// reduction in Reduce, the value codec in Param (sparse messages always
// use the codec's default bucket).
func spDesc[T Float](kind transport.OpKind, red ReduceOp, codec quant.Kind, algo Algo) transport.Desc {
	return transport.Desc{Kind: kind, DType: uint8(DTypeOf[T]()), Reduce: uint8(red), Algo: uint8(algo),
		Param: codecParam(codec, 0)}
}

// algoOr is a, or def when a is AlgoAuto.
func algoOr(a, def Algo) Algo {
	if a == AlgoAuto {
		return def
	}
	return a
}

// denseSparseAllreduce is the dense end of the sparse-to-dense switch: the
// input is densified into out and reduced with the dense allreduce algo.
// The model picks it when the inputs are dense enough that no sparse
// schedule beats moving the whole vector. It is exact whatever
// SparseOptions.Quant says: the dense quantized allreduce is a separate
// call (QuantizedAllreduce), and the model prices this path at full
// precision. Its messages keep the sparse allreduce's descriptor, algo
// in it: for the transport the whole call is one sparse allreduce.
func denseSparseAllreduce[T Float](op *Op, in, out *sparse.Vector[T], red ReduceOp, algo Algo) error {
	values := in.ToDense(out.Values[:0])
	out.Dim, out.Dense, out.Block, out.Values = in.Dim, true, in.Block, values
	out.Indices = out.Indices[:0]
	return runAllreduce(op, out.Values, red, algo, segmentElems[T](op))
}

// sparseAlgos are the sparse allreduce algorithms, in the order that breaks
// the model's ties (fewest messages first).
var sparseAlgos = [...]Algo{AlgoSSARRecursiveDoubling, AlgoSparseAllgather, AlgoSSARSplitAllgather, AlgoDSAR}

func isSparseAlgo(a Algo) bool {
	for _, s := range sparseAlgos {
		if a == s {
			return true
		}
	}
	return false
}

// spCall is the state of one sparse collective on one rank.
type spCall[T Float] struct {
	op      *Op
	in      *sparse.Vector[T]
	p, rank int
	// es is the size of one stored entry's values: a value, or a row of
	// a block input (in.EntrySize()).
	es     int
	bounds []int
	sc     spScratch
	// q is the coder of a lossy value codec, nil for exact values.
	q *sparse.QuantCoder
	// packed: exact values go with packed indices.
	packed bool
	// carried are the slices of this rank's range the counts exchange
	// carried (carried[q] from rank q), when they are the scatter of the
	// algorithm that runs (useCarried); nil otherwise.
	carried [][]byte
}

// setQuant sets up the value codec of a call: nothing for quant.None.
func (c *spCall[T]) setQuant(kind quant.Kind, seed uint64) error {
	if kind.Lossless() {
		return nil
	}
	q, _ := spCoderPool.Get().(*sparse.QuantCoder)
	if q == nil {
		q = &sparse.QuantCoder{}
	}
	if err := q.Reset(kind, quant.Options{Seed: seed}); err != nil {
		return c.op.Fail(fmt.Errorf("%w: %w", transport.ErrInvalid, err))
	}
	c.q, c.sc.coder = q, q
	return nil
}

// spCoderPool keeps quantized coders, whose scratch space grows to the
// largest message encoded, between calls.
var spCoderPool sync.Pool

// finish writes res into out: dense when asked, else in res's form (which
// the kernels keep the smaller one), switching a sparse input that is past
// the rule to dense.
func (c *spCall[T]) finish(out, res *sparse.Vector[T], denseOut bool) {
	if denseOut || res.Dense || sparse.PreferDense(len(res.Indices), res.Dim, res.EntrySize()) {
		out.Values = res.ToDense(out.Values)
		out.Dim, out.Dense, out.Block, out.Indices = res.Dim, true, res.Block, out.Indices[:0]
		return
	}
	out.CopyFrom(res)
}

// vector returns a scratch vector from spVectorPool, with whatever
// capacity it grew to in earlier calls: the kernels size their outputs
// themselves, so reuse needs no size hint.
func (c *spCall[T]) vector() *sparse.Vector[T] {
	v := spGetVector[T]()
	c.sc.vectors = append(c.sc.vectors, v)
	return v
}

// encode appends v's slice [lo, hi) in its smaller encoding, quantized
// when the call has a lossy codec; v is valid (checked input or a
// kernel's output), so an error is a bug, reported on every rank rather
// than a panic.
func (c *spCall[T]) encode(dst []byte, v *sparse.Vector[T], lo, hi int) ([]byte, error) {
	var b []byte
	var err error
	if c.q != nil {
		b, err = v.AppendEncodeRangeQuant(dst, lo, hi, c.q)
	} else {
		b, err = c.encodeExact(dst, v, lo, hi)
	}
	if err != nil {
		return nil, c.op.Fail(err)
	}
	if c.q == nil {
		c.codecWork(len(b) - len(dst))
	} else {
		c.codecWork(spRangeEntryBytes(v, lo, hi))
	}
	return b, nil
}

// codecWork reports the encoding or decoding of a message whose entries
// take bytes in memory (the wire size with exact values) to the transport
// (transport.Work): the simulator charges it as the cost model does, at
// sparseCodecFactor dense reductions a byte.
func (c *spCall[T]) codecWork(bytes int) {
	transport.Work(c.op.T, transport.KernelReduce, sparseCodecFactor*bytes)
}

// spRangeEntryBytes is the in-memory size of v's entries in [lo, hi).
func spRangeEntryBytes[T Float](v *sparse.Vector[T], lo, hi int) int {
	if v.Dense {
		return (hi - lo) * sparse.ValueSize[T]()
	}
	a, b := v.RangeBounds(lo, hi)
	return (b - a) * (sparse.IndexSize + sparse.ValueSize[T]())
}

// resultGuess is the encoded size of the result if every rank brought
// as many entries as this one and none overlapped: the size receive and
// send buffers start from (a larger message makes the transport allocate).
func (c *spCall[T]) resultGuess() int {
	k := min(c.p*c.in.NNZ(), c.in.Dim)
	return c.compactSize(k, c.in.Dim)
}

// decode decodes a peer's message into v and checks its dimension: a
// message that does not decode fails the operation everywhere.
func (c *spCall[T]) decode(v *sparse.Vector[T], b []byte, peer, dim int) error {
	var err error
	if c.q != nil {
		err = v.DecodeQuant(b, c.q)
	} else {
		err = v.Decode(b)
	}
	if err != nil {
		return c.op.Fail(fmt.Errorf("%w: rank %d sent a bad vector: %w", transport.ErrProtocol, c.op.commRank(peer), err))
	}
	return c.checkReceived(v, peer, dim)
}

// checkReceived checks a decoded message's dimension and block against
// this call's.
func (c *spCall[T]) checkReceived(v *sparse.Vector[T], peer, dim int) error {
	if v.Dim != dim || v.BlockLen() != c.in.BlockLen() {
		return c.op.Fail(fmt.Errorf("%w: rank %d sent a vector of dimension %d and block %d, expected %d and %d",
			transport.ErrMismatch, c.op.commRank(peer), v.Dim, v.BlockLen(), dim, c.in.BlockLen()))
	}
	return nil
}

// received decodes a peer's message for reading only: exact values are
// used where they landed, as a view of b (released with it at the end of
// the call), lossy ones decoded into a pooled vector. A view is a fresh
// vector, never a pooled one, so no pooled buffer ever aliases b.
func (c *spCall[T]) received(b []byte, peer, dim int) (*sparse.Vector[T], error) {
	if c.q != nil || sparse.IsPacked(b) {
		// Decoded into a pooled vector: lossy values, or packed
		// indices (which cannot be viewed in place).
		v := c.vector()
		if err := c.decode(v, b, peer, dim); err != nil {
			return nil, err
		}
		c.codecWork(entryBytes([]*sparse.Vector[T]{v}))
		return v, nil
	}
	v := &sparse.Vector[T]{}
	if err := v.DecodeView(b); err != nil {
		return nil, c.op.Fail(fmt.Errorf("%w: rank %d sent a bad vector: %w", transport.ErrProtocol, c.op.commRank(peer), err))
	}
	c.codecWork(len(b))
	return v, c.checkReceived(v, peer, dim)
}

// recv posts a receive from peer at step into a pooled buffer of about
// guess bytes (the transport allocates if the message is larger).
func (c *spCall[T]) recv(peer int, step uint32, guess int) *transport.Request {
	return c.op.Recv(peer, step, c.sc.getRecv(guess))
}

// getRecv is get for a receive of a message of about n bytes: a sparse
// message's size is only estimated (it is usually the size of what this
// rank sends, give or take a few percent), and a message larger than its
// posted buffer makes the transport allocate a fresh one, whose first
// touch costs page faults; with an eighth of headroom the pooled buffers
// fit from the first calls on. The fixed part is small: a rank posts P-1
// of these at once (ssar-split, dsar), and a short message that outgrows
// its buffer costs a fresh allocation of a page or two, not faults by the
// hundred; `sparcml sim` at P = 1024 holds every rank's receives in one
// process (docs/SIMULATION.md, Limits).
func (s *spScratch) getRecv(n int) []byte {
	return s.get(n + n/8 + 256)
}

// data waits for a receive and keeps its payload buffer for release.
func (c *spCall[T]) data(r *transport.Request) ([]byte, error) {
	b, err := c.op.WaitData(r)
	if err != nil {
		return nil, err
	}
	c.sc.keep(b)
	return b, nil
}

// spEqualBounds splits [0, dim) into p ranges whose lengths differ by at
// most one.
func spEqualBounds(dim, p int) []int {
	b := make([]int, p+1)
	for i := range b {
		b[i] = int(uint64(dim) * uint64(i) / uint64(p))
	}
	return b
}

// spScratch tracks the pooled buffers of one call so they go back to the
// pool at the end, once every send that reads them has completed.
type spScratch struct {
	pool    *Buffers
	bufs    [][]byte
	vectors []spPooled
	coder   *sparse.QuantCoder // of a lossy codec, nil otherwise
}

// spPooled is a scratch vector of any value type, to return to its pool.
type spPooled interface{ Reset(dim int) }

// spVectorPool keeps scratch vectors between calls, one pool per value
// size. Vectors of a named float type do not match the type assertion and
// are simply not reused.
var spVectorPool [2]sync.Pool

func spPoolIndex[T Float]() int { return sparse.ValueSize[T]() / 8 }

func spGetVector[T Float]() *sparse.Vector[T] {
	if v, ok := spVectorPool[spPoolIndex[T]()].Get().(*sparse.Vector[T]); ok {
		return v
	}
	return &sparse.Vector[T]{}
}

func (s *spScratch) get(n int) []byte {
	b := s.pool.Get(max(n, 8))
	s.bufs = append(s.bufs, b)
	return b
}

// keep records a buffer the transport allocated for a received message.
func (s *spScratch) keep(b []byte) { s.bufs = append(s.bufs, b) }

// drop returns b to the pool before the call ends, and forgets it (each
// listing of its array): for a received message once it is merged, when
// nothing refers to it any more.
func (s *spScratch) drop(b []byte) {
	if cap(b) == 0 {
		return
	}
	kept := s.bufs[:0]
	found := false
	for _, o := range s.bufs {
		if spSameArray(o, b) {
			found = true
			continue
		}
		kept = append(kept, o)
	}
	clear(s.bufs[len(kept):])
	s.bufs = kept
	if found {
		s.pool.Put(b)
	}
}

// dropVector returns scratch vector v to its pool before the call ends.
func (s *spScratch) dropVector(v spPooled) {
	if i := slices.Index(s.vectors, v); i >= 0 {
		s.vectors = slices.Delete(s.vectors, i, i+1)
		spPutVector(v)
	}
}

// spSameArray says whether a and b share their backing array.
func spSameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && unsafe.SliceData(a[:cap(a)]) == unsafe.SliceData(b[:cap(b)])
}

// spPutVector empties v and returns it to spVectorPool.
func spPutVector(v spPooled) {
	v.Reset(0)
	switch v := v.(type) {
	case *sparse.Vector[float32]:
		spVectorPool[0].Put(v)
	case *sparse.Vector[float64]:
		spVectorPool[1].Put(v)
	}
}

// release returns every buffer, each once, to the pool.
func (s *spScratch) release() {
	for _, v := range s.vectors {
		spPutVector(v)
	}
	// A buffer can be listed twice (a receive that landed in the pooled
	// buffer it was given); the lists are short, so a scan finds repeats.
	for i, b := range s.bufs {
		if cap(b) == 0 {
			continue
		}
		p := unsafe.SliceData(b[:cap(b)])
		repeat := false
		for _, o := range s.bufs[:i] {
			if cap(o) > 0 && unsafe.SliceData(o[:cap(o)]) == p {
				repeat = true
				break
			}
		}
		if !repeat {
			s.pool.Put(b)
		}
	}
	if s.coder != nil {
		spCoderPool.Put(s.coder)
	}
	s.bufs, s.vectors, s.coder = nil, nil, nil
}

// abandon drops the buffers after a failure: a send may still be reading
// one, so they are left to the garbage collector instead of the pool.
func (s *spScratch) abandon() { s.bufs, s.vectors, s.coder = nil, nil, nil }

func sparseCheckOp(op *Op) error {
	if op == nil || op.T == nil || op.Ctx == nil {
		return fmt.Errorf("%w: nil op, transport or context", transport.ErrInvalid)
	}
	return nil
}

func sparseFailInvalid(op *Op, format string, args ...any) error {
	return op.Fail(fmt.Errorf("%w: %s", transport.ErrInvalid, fmt.Sprintf(format, args...)))
}

// errSparseProtocol builds the error for a malformed message from peer.
func errSparseProtocol(peer int, format string, args ...any) error {
	return fmt.Errorf("%w: rank %d: %s", transport.ErrProtocol, peer, fmt.Sprintf(format, args...))
}

// newSpCall is the state of a sparse collective of in on op's rank.
func newSpCall[T Float](op *Op, in *sparse.Vector[T]) *spCall[T] {
	return &spCall[T]{op: op, in: in, p: op.Size(), rank: op.Rank(), es: in.EntrySize(), sc: spScratch{pool: op.Pool}}
}

// spBlockDesc is the descriptor's Root field of a sparse collective: the
// block of a block input (so ranks that pass different row widths fail
// with ErrMismatch), 0 for an element input. Sparse collectives have no
// root of their own.
func spBlockDesc[T Float](in *sparse.Vector[T]) int32 {
	if in == nil || !in.IsBlock() || in.Block > sparse.MaxBlock {
		return 0
	}
	return int32(in.Block)
}

// spCheckBlockOptions refuses what block (row-sparse) inputs do not
// support: a lossy codec (rows travel exact) and the hierarchical
// schedule.
func spCheckBlockOptions(op *Op, opts SparseOptions) error {
	if !opts.Quant.Lossless() {
		return sparseFailInvalid(op, "a block vector travels exact: the lossy codec %v does not take rows", opts.Quant)
	}
	if opts.Algo == AlgoHierarchical {
		return sparseFailInvalid(op, "%v does not take block vectors; use %v, %v, %v, %v or %v", opts.Algo,
			AlgoAuto, AlgoSSARRecursiveDoubling, AlgoSSARSplitAllgather, AlgoDSAR, AlgoSparseAllgather)
	}
	return nil
}

// compactSize is the size of the smaller encoding of nnz entries of a
// dim-position range of this call's vectors, headroom for the block
// header included: what a send buffer starts from, so the encoder does
// not reallocate (BenchmarkSparseBlockAllreduce's allocations).
func (c *spCall[T]) compactSize(nnz, dim int) int {
	return sparse.CompactSize(nnz, dim, c.es) + sparse.BlockHeaderSize - sparse.HeaderSize
}
