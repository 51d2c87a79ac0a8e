package collectives

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// The agreement record every rank contributes before an AlgoAuto or
// Balanced sparse allreduce (little-endian):
//
//	0  4  magic "SPAG"
//	4  1  requested algorithm
//	5  1  flags: 1 balanced, 2 the message carries the sender's slice of
//	      the receiver's equal range behind the record (sparse_agree_carry.go)
//	6  2  reserved (0)
//	8  8  stored entries of the rank's input
//	16 24 the cost model: Alpha, Beta, Gamma as float64 bits
//	40 4  q, number of index samples that follow (0 for an empty input)
//	44 4  reserved (0)
//	48 4q the samples: indices at evenly spaced ranks of the input's support
const (
	spAgreeMagic      = 0x47415053 // "SPAG"
	spAgreeHeader     = 48
	spAgreeMaxSamples = 4096
	spFlagBalanced    = 1
	spFlagCarries     = 2
)

// spSampleCount is how many index samples a rank of nnz entries sends for
// balanced ranges on p ranks and a dimension of dim: 16 per range of its
// own, at least 32 and at most spMaxSamples, and at most one per
// spSampleEntries entries, so that a small input's samples do not cost
// more than its entries. Every rank receives every rank's samples: at 256
// ranks, 256 samples a rank are 275 KB received by each, 263 us of auto's
// 1740 at 1% of 256K on 10 Gbit/s, where forced ssar-split took 1477
// (`sparcml sim -n 256 --op sparse-allreduce --sizes 256K --density 0.01
// --indices raw --algo all`, docs/SIMULATION.md, "Auto against the best
// forced algorithm").
//
// Past that the samples of all ranks together are bounded, by
// spSampleBudget and by one per spSampleSpacing positions of the
// dimension (the result is at most the dimension, and the samples every
// rank receives should stay a small part of it), down to spMinSamples a
// rank: at 1024 ranks, 128 a rank were 0.5 MB received by each, auto
// 1.30x forced ssar-split at 1% of 256K; at 256 ranks on 64K, 82 a rank
// (96 KB received by each) made auto 1.21x forced ssar-split at 1%, 16
// a rank 1.07x (SIMULATION.md).
func spSampleCount(p, dim, nnz int) int {
	budget := min(spSampleBudget, dim/spSampleSpacing)
	perRank := min(spMaxSamples, max(spMinSamples, budget/max(p, 1)))
	return min(max(16*p, 32), perRank, (nnz+spSampleEntries-1)/spSampleEntries)
}

// spMaxSamples bounds a rank's samples: enough that a skew of the equal
// ranges stands out of the samples' noise (equalRangesSkewed) at 1.25x
// the mean share at 256 ranks.
const spMaxSamples = 128

// spSampleBudget and spSampleSpacing bound the samples of all ranks
// together (32768, 128 KB; one per 16 positions), spMinSamples the fewest
// a rank then sends: a power-law support still stands out at 1024 ranks,
// and a range that holds 6x the mean share (TestEqualRangesSkewed); with
// 16 a rank there the samples find a skew from about 3.5x, where a hot
// range of 2x, left on equal ranges, costs its owner one mean share more
// of the scatter (21 KB at 1% of 256K, 17 us at 10 Gbit/s) and finding it
// cost every rank 64 KB more of samples.
const (
	spSampleBudget  = 32768
	spSampleSpacing = 16
	spMinSamples    = 16
)

// spSampleEntries is the fewest entries a sample stands for.
const spSampleEntries = 8

// spSampleWeight is the weight of one of q samples of a rank of nnz
// entries, in units of 1/spWeightUnit entry: integers, so that every rank
// computes the same bounds.
func spSampleWeight(nnz, q int) uint64 {
	if q == 0 {
		return 0
	}
	return uint64(nnz) * spWeightUnit / uint64(q)
}

const spWeightUnit = 1 << 12

// spAgreement is what every rank learned from the exchange: identical on
// all ranks, so every decision taken from it is too.
type spAgreement struct {
	nnz       []int      // stored entries of each rank's input
	samples   [][]uint32 // each rank's index samples (balanced only)
	bytesSent []int64    // payload each rank sent in the exchange
	seconds   float64    // the exchange's modelled time
	// slices are the slices of this rank's equal range that every rank
	// carried behind its record (slices[q] from rank q, nil for this
	// rank), nil unless every rank carried (sparse_agree_carry.go).
	slices [][]byte
}

func (a *spAgreement) total() int64 {
	var t int64
	for _, n := range a.nnz {
		t += int64(n)
	}
	return t
}

// agree allgathers every rank's record, checks that the ranks passed the
// same options and returns what they reported.
func (c *spCall[T]) agree(opts SparseOptions) (*spAgreement, error) {
	// Samples always: balanced ranges need them, and AlgoAuto runs
	// ssar-split on balanced ranges (splitBounds).
	return c.agreeSampled(opts, spExchange{q: spSampleCount(c.p, c.in.Dim, c.in.NNZ()), direct: spDirectAgree(opts.Model, c.p), stagger: true,
		carry: c.q == nil && spMayCarry(opts.Model, opts, c.p)})
}

// spExchange is how a counts exchange runs: q index samples per rank, at
// the midpoints of q equal slices of its support or staggered by rank
// (rank r of P at (r+1/2)/P of each slice), sent in one round (direct,
// spAllgatherDirect) or in Bruck's ceil(log2 P).
//
// Staggered, the ranks' samples interleave: on supports drawn alike,
// which midpoints sample at the same q quantiles on every rank, all P q
// of them sample P q distinct quantiles, as one rank's P q samples
// would. With midpoints and q below P (32 a rank at 128 ranks) the
// pooled samples bunch at q places a few ranges apart, and balanced
// ranges built on them made ssar-split 1.5x slower at 1% of 256K on 10
// Gbit/s (`sparcml sim -n 128 --op sparse-allreduce --sizes 256K
// --density 0.01 --indices raw --algo auto,ssar-split`).
//
// With carry (direct only) the exchange is the carrying one: the message
// to each rank may carry, behind the record, this rank's slice of that
// rank's equal range (spCarries decides; sparse_agree_carry.go).
type spExchange struct {
	q                      int
	direct, stagger, carry bool
}

// agreeSampled is agree with the exchange x.
func (c *spCall[T]) agreeSampled(opts SparseOptions, x spExchange) (*spAgreement, error) {
	q, direct := x.q, x.direct
	num, den := uint64(1), uint64(2) // midpoints
	if x.stagger {
		num, den = uint64(2*c.rank+1), uint64(2*c.p)
	}
	mine := c.sc.get(spAgreeHeader + 4*q)[:0]
	carries := x.carry && spCarries(opts.Model, opts, c.rank, spSliceSizes(c.in, c.p, spWireOfVector(c.in, quant.None).hdr))
	mine = spAppendRecord(mine, opts, c.in.NNZ(), spSampleIndices(c.in, q, num, den), carries)
	var blobs, tails [][]byte
	var carried int64
	var err error
	switch {
	case direct && x.carry:
		blobs, tails, carried, err = c.exchangeCarrying(mine, carries)
	case direct:
		blobs, err = spAllgatherDirect(c.op, &c.sc, spStepAgree, mine, spRecordSize)
	default:
		blobs, err = spAllgatherBlobs(c.op, &c.sc, spStepAgree, mine, spRecordSize)
	}
	if err != nil {
		return nil, err
	}
	ag := &spAgreement{nnz: make([]int, c.p), samples: make([][]uint32, c.p)}
	sizes := make([]int64, c.p)
	allCarry := true
	for r, b := range blobs {
		rec, err := spParseRecord(b, c.in.Dim)
		if err != nil {
			return nil, c.op.Fail(errSparseProtocol(c.op.commRank(r), "agreement record: %v", err))
		}
		if rec.algo != opts.Algo || rec.balanced != opts.Balanced || rec.model != onWire(opts.Model) {
			return nil, c.op.Fail(fmt.Errorf("%w: rank %d passed algo=%v balanced=%v model=%+v but rank %d passed algo=%v balanced=%v model=%+v; every rank must pass the same SparseOptions",
				transport.ErrMismatch, c.op.commRank(r), rec.algo, rec.balanced, rec.model, c.op.commRank(c.rank), opts.Algo, opts.Balanced, opts.Model))
		}
		if r != c.rank && rec.carries != (tails != nil && tails[r] != nil) {
			return nil, c.op.Fail(errSparseProtocol(c.op.commRank(r), "agreement record says carries=%v, message disagrees", rec.carries))
		}
		allCarry = allCarry && rec.carries
		ag.nnz[r], ag.samples[r] = rec.nnz, rec.samples
		sizes[r] = int64(len(b))
	}
	if allCarry {
		ag.slices = tails
	}
	ag.bytesSent, _ = spAgreeBytesSent(sizes, direct)
	ag.bytesSent[c.rank] += carried
	pl := newSpPlan(opts.Model, c.p)
	fsizes := make([]float64, c.p)
	for r, n := range sizes {
		fsizes[r] = float64(n)
	}
	if direct {
		pl.direct(fsizes)
	} else {
		pl.bruck(fsizes, nil, nil, 0)
	}
	ag.seconds = pl.seconds
	return ag, nil
}

// spDirectAgree says whether the counts exchange of AlgoAuto and
// Balanced goes in one round, every rank posting its record to every
// other at once (spAllgatherDirect), rather than in Bruck's ceil(log2 P)
// rounds one after the other: when the model knows the part of Alpha
// that messages posted together overlap (CostModel.Latency) and one
// round of P-1 messages is predicted cheaper than ceil(log2 P) of one.
// The records are the same bytes either way. It depends on the model and
// P alone, so every rank exchanges the same way. Without Latency (a
// calibration, DefaultCostModel) every message costs a full Alpha and the
// exchange stays Bruck's. In simulated time, at 8 ranks and 0.1% of 256K
// the exchange's three rounds were 15 us of auto's 62 where forced
// ssar-split took 46 (docs/SIMULATION.md, "Auto against the best forced
// algorithm").
func spDirectAgree(m CostModel, p int) bool {
	if m == (CostModel{}) {
		m = DefaultCostModel
	}
	return m.latency()+float64(p-1)*m.perMessage() < float64(ceilLog2(p))*m.Alpha
}

// spAgreeBytesSent is the payload each rank sends and its message count
// in the exchange of records of the given sizes, direct or Bruck's.
func spAgreeBytesSent(size []int64, direct bool) (bytes []int64, msgs []int) {
	if !direct {
		return spBruckBytesSent(size)
	}
	p := len(size)
	bytes, msgs = make([]int64, p), make([]int, p)
	for r, n := range size {
		bytes[r], msgs[r] = int64(p-1)*n, p-1
	}
	return bytes, msgs
}

// spAllgatherDirect gives every rank every rank's blob in one round: each
// rank posts a receive from every other rank and sends its blob to every
// other rank, all at once, and waits for them all (P-1 messages each way,
// one latency; spAllgatherBlobs forwards in ceil(log2 P) rounds instead).
// A message is one blob, whose size sizeOf reads from its header. The
// blobs returned alias the received messages, kept in sc until the call
// ends; blobs[Rank()] is mine.
func spAllgatherDirect(op *Op, sc *spScratch, step uint32, mine []byte, sizeOf func([]byte) (int, error)) ([][]byte, error) {
	p, rank := op.Size(), op.Rank()
	recvs := make([]*transport.Request, p)
	for i := 1; i < p; i++ {
		from := (rank + i) % p
		recvs[from] = op.Recv(from, step, sc.getRecv(len(mine)))
	}
	sends := make([]*transport.Request, 0, p-1)
	for i := 1; i < p; i++ {
		sends = append(sends, op.Send((rank-i+p)%p, step, mine))
	}
	blobs := make([][]byte, p)
	blobs[rank] = mine
	for i := 1; i < p; i++ {
		from := (rank + i) % p
		msg, err := op.WaitData(recvs[from])
		if err != nil {
			return nil, err
		}
		sc.keep(msg)
		if n, err := sizeOf(msg); err != nil || n != len(msg) {
			return nil, op.Fail(errSparseProtocol(op.commRank(from), "record of %d bytes: %v", len(msg), err))
		}
		blobs[from] = msg
	}
	if err := op.Wait(sends...); err != nil {
		return nil, err
	}
	return blobs, nil
}

// spSampleIndices returns q indices of v's support at evenly spaced ranks,
// at num/den (below 1) of each of q equal slices (1/2: their midpoints), or
// none when v stores nothing.
func spSampleIndices[T Float](v *sparse.Vector[T], q int, num, den uint64) []uint32 {
	k := v.NNZ()
	if q == 0 || k == 0 {
		return nil
	}
	s := make([]uint32, q)
	for j := range s {
		hi, lo := bits.Mul64(uint64(j)*den+num, uint64(k))
		pos, _ := bits.Div64(hi, lo, uint64(q)*den) // below k
		if v.Dense {
			s[j] = uint32(pos)
		} else {
			s[j] = v.Indices[pos]
		}
	}
	return s
}

func spAppendRecord(b []byte, opts SparseOptions, nnz int, samples []uint32, carries bool) []byte {
	b = binary.LittleEndian.AppendUint32(b, spAgreeMagic)
	flags := byte(0)
	if opts.Balanced {
		flags |= spFlagBalanced
	}
	if carries {
		flags |= spFlagCarries
	}
	b = append(b, byte(opts.Algo), flags, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(nnz))
	for _, x := range []float64{opts.Model.Alpha, opts.Model.Beta, opts.Model.Gamma} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(samples)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, s := range samples {
		b = binary.LittleEndian.AppendUint32(b, s)
	}
	return b
}

// spRecordSize is the size of the record at the start of b.
func spRecordSize(b []byte) (int, error) {
	if len(b) < spAgreeHeader {
		return 0, fmt.Errorf("record of %d bytes", len(b))
	}
	q := binary.LittleEndian.Uint32(b[40:])
	if q > spAgreeMaxSamples {
		return 0, fmt.Errorf("%d samples", q)
	}
	n := spAgreeHeader + 4*int(q)
	if n > len(b) {
		return 0, fmt.Errorf("record of %d bytes announces %d", len(b), n)
	}
	return n, nil
}

type spRecord struct {
	algo     Algo
	balanced bool
	carries  bool // the sender's messages carry its slices
	nnz      int
	model    CostModel
	samples  []uint32
}

// spParseRecord checks a record from a peer: it must be exactly one
// record, with a count within the dimension and sorted samples below it.
func spParseRecord(b []byte, dim int) (spRecord, error) {
	var r spRecord
	n, err := spRecordSize(b)
	if err != nil {
		return r, err
	}
	if n != len(b) || binary.LittleEndian.Uint32(b) != spAgreeMagic {
		return r, fmt.Errorf("bad magic or length")
	}
	r.algo, r.balanced, r.carries = Algo(b[4]), b[5]&spFlagBalanced != 0, b[5]&spFlagCarries != 0
	nnz := binary.LittleEndian.Uint64(b[8:])
	if nnz > uint64(dim) {
		return r, fmt.Errorf("%d entries for dimension %d", nnz, dim)
	}
	r.nnz = int(nnz)
	r.model = CostModel{
		Alpha: math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
		Beta:  math.Float64frombits(binary.LittleEndian.Uint64(b[24:])),
		Gamma: math.Float64frombits(binary.LittleEndian.Uint64(b[32:])),
	}
	q := (n - spAgreeHeader) / 4
	if q > 0 {
		r.samples = make([]uint32, q)
		for j := range r.samples {
			r.samples[j] = binary.LittleEndian.Uint32(b[spAgreeHeader+4*j:])
			if int(r.samples[j]) >= dim || (j > 0 && r.samples[j] < r.samples[j-1]) {
				return r, fmt.Errorf("sample %d at position %d out of range or order", r.samples[j], j)
			}
		}
	}
	return r, nil
}

// onWire is the part of a cost model the agreement record carries (and so
// compares): SparseGamma, IndexCodec, LocalAlpha, LocalBeta and Latency
// are left out, as the record's layout predates them; communicators set
// every field from rank 0's calibration alike.
func onWire(m CostModel) CostModel {
	m.SparseGamma, m.IndexCodec, m.LocalAlpha, m.LocalBeta, m.Latency = 0, 0, 0, 0, 0
	return m
}
