package startup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/topology"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
)

// Link is what calibration needs of the library's own communicator (on
// which its messages travel, so the user's operations are numbered from
// 1): the collectives and point-to-point operations of the public API.
type Link struct {
	Rank, Size int
	Barrier    func(ctx context.Context) error
	Allgather  func(ctx context.Context, in, out []float64) error
	Broadcast  func(ctx context.Context, data []float64, root int) error
	Send       func(ctx context.Context, data []float32, peer int) error
	Recv       func(ctx context.Context, buf []float32, peer int) error
	// StartRecv posts a receive and returns what waits for it.
	StartRecv func(ctx context.Context, buf []float32, peer int) (wait func(context.Context) error)
}

// Calibrate measures the cost model's parameters for this job at start-up,
// so AlgoAuto chooses with this network's latency and bandwidth rather than
// a guess. Every rank times a dense and a sparse reduction at once (ranks
// sharing cores then see the contention a real run sees) and the lossless
// index codec of exact sparse messages, and the model takes the median
// rank's figures; two ranks time round trips of empty messages (alpha) and
// one-way 4 MiB transfers into a posted receive (beta): rank 0 and the
// lowest rank of another host when the job spans several (the network the
// collectives cross, not a host's shared memory), else ranks 0 and 1. With
// several hosts and a neighbour on rank 0's host, rank 0 also measures that
// pair: the figures within a host, the model's LocalAlpha and LocalBeta,
// for the algorithms that follow the hosts. Rank 0 broadcasts the figures
// so every rank holds the same model and makes the same choices. Init
// skips it when SPARCML_CALIBRATE=0.
func Calibrate(ctx context.Context, l Link, topo topology.Topology) (collectives.CostModel, error) {
	// Every rank starts the kernels at the same moment, so that ranks
	// sharing cores time them while the others run too.
	if err := l.Barrier(ctx); err != nil {
		return collectives.CostModel{}, err
	}
	mine := []float64{measureGamma(), measureSparseGamma(), measureIndexCodec()}
	all := make([]float64, len(mine)*l.Size)
	if err := l.Allgather(ctx, mine, all); err != nil {
		return collectives.CostModel{}, err
	}
	gammas := medianByColumn(all, len(mine))
	// model: alpha, beta, gamma, sparse gamma, then alpha and beta
	// within rank 0's host (0 when not measured), then the index codec.
	model := []float64{0, 0, gammas[0], gammas[1], 0, 0, gammas[2]}
	for i, peer := range CalibrationPeers(topo) {
		var err error
		switch l.Rank {
		case 0:
			model[4*i], model[4*i+1], err = pingPong(ctx, l, peer, true)
		case peer:
			_, _, err = pingPong(ctx, l, 0, false)
		}
		if err != nil {
			return collectives.CostModel{}, err
		}
	}
	if err := l.Broadcast(ctx, model, 0); err != nil {
		return collectives.CostModel{}, err
	}
	m := collectives.CostModel{Alpha: model[0], Beta: model[1], Gamma: model[2], SparseGamma: model[3],
		LocalAlpha: model[4], LocalBeta: model[5], IndexCodec: model[6]}
	if m.Alpha <= 0 || m.Beta <= 0 || m.Gamma <= 0 || m.SparseGamma <= 0 || m.IndexCodec <= 0 {
		return m, fmt.Errorf("unusable model %+v", m)
	}
	return m, nil
}

// medianByColumn is the median of each of the cols figures every rank
// contributed to rows (rank r's at rows[r*cols:]), the upper one of an even
// count. The median, not the slowest rank's figure: a rank whose runs
// the kernel's other work took over (softirqs of the emulated links at 10
// Gbit/s, a process of the last job still exiting) would otherwise price
// every rank's reductions (docs/PERFORMANCE.md, "Start-up and
// calibration").
func medianByColumn(rows []float64, cols int) []float64 {
	n := len(rows) / cols
	out := make([]float64, cols)
	col := make([]float64, n)
	for j := range out {
		for r := range n {
			col[r] = rows[r*cols+j]
		}
		slices.Sort(col)
		out[j] = col[n/2]
	}
	return out
}

// CalibrationPeers are the ranks rank 0 measures alpha and beta with: the
// first for the model (the lowest rank on another host when there are
// several, else rank 1), the second, if any, its neighbour on its own host
// when the first is not.
func CalibrationPeers(topo topology.Topology) []int {
	if topo.Hosts < 2 {
		return []int{1}
	}
	far := slices.IndexFunc(topo.HostOf, func(h int) bool { return h != topo.HostOf[0] })
	if near := topo.RanksOn(topo.HostOf[0]); len(near) > 1 {
		return []int{far, near[1]}
	}
	return []int{far}
}

const (
	calibrateRounds    = 20
	calibrateTransfers = 7
	calibrateBytes     = 4 << 20
)

// pingPong runs between two ranks: calibrateRounds round trips of empty
// messages, then calibrateTransfers one-way transfers of calibrateBytes.
// The initiator returns alpha, half the median round trip, and beta, the
// median transfer (send plus the empty acknowledgement) less two alphas,
// per byte; both clamped to ranges that keep a disturbed measurement from
// giving an absurd model.
func pingPong(ctx context.Context, l Link, peer int, initiator bool) (alpha, beta float64, err error) {
	empty := []float32{}
	big := make([]float32, calibrateBytes/4)
	rtts := make([]float64, 0, calibrateRounds)
	for i := 0; i < calibrateRounds; i++ {
		t0 := time.Now()
		if initiator {
			if err = l.Send(ctx, empty, peer); err == nil {
				err = l.Recv(ctx, empty, peer)
			}
		} else if err = l.Recv(ctx, empty, peer); err == nil {
			err = l.Send(ctx, empty, peer)
		}
		if err != nil {
			return 0, 0, err
		}
		rtts = append(rtts, time.Since(t0).Seconds())
	}
	// Large transfers into a receive posted in advance (as collectives
	// post theirs), so the figure is the wire's, not an unexpected
	// message's extra copy: the responder posts, says ready, receives and
	// acknowledges; the initiator times send plus acknowledgement.
	transfers := make([]float64, 0, calibrateTransfers)
	for i := 0; i < calibrateTransfers; i++ {
		if initiator {
			if err = l.Recv(ctx, empty, peer); err != nil {
				return 0, 0, err
			}
			t0 := time.Now()
			if err = l.Send(ctx, big, peer); err == nil {
				err = l.Recv(ctx, empty, peer)
			}
			transfers = append(transfers, time.Since(t0).Seconds())
		} else {
			wait := l.StartRecv(ctx, big, peer)
			if err = l.Send(ctx, empty, peer); err == nil {
				if err = wait(ctx); err == nil {
					err = l.Send(ctx, empty, peer)
				}
			}
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if !initiator {
		return 0, 0, nil
	}
	slices.Sort(rtts)
	slices.Sort(transfers)
	alpha = clamp(rtts[len(rtts)/2]/2, 1e-6, 10e-3)
	beta = clamp((transfers[len(transfers)/2]-2*alpha)/calibrateBytes, 1e-12, 1e-6)
	return alpha, beta, nil
}

// measureGamma times a dense float32 sum of two 1Mi-element vectors, the
// best of five: seconds per byte of the vector reduced.
func measureGamma() float64 {
	a := make([]float32, 1<<20)
	b := make([]float32, 1<<20)
	best := 1.0
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		collectives.ReduceInto(collectives.Sum, a, b)
		best = min(best, time.Since(t0).Seconds())
	}
	return clamp(best/float64(4*len(a)), 1e-12, 1e-8)
}

// measureSparseGamma times the sparse kernel the SSAR algorithms reduce
// with: a merge of two vectors of up to 400Ki random entries (about 10%,
// fewer after duplicates are dropped) in a dimension of 4Mi, the median
// of seven. Seconds per byte of entries (index and value) merged. The
// median, not the best: the sparse allgather and recursive doubling have
// every rank reduce as much at the same moment, so on ranks that share
// cores a merge takes a share of a core, and so it does here, every rank
// timing at once. The best of a few runs would catch a rank alone on a
// core and price those reductions as if the cores were not shared
// (docs/PERFORMANCE.md, "Auto against the best forced algorithm", whose
// bench/results/cluster.md puts predicted_us next to the time of each
// algorithm, side by side).
func measureSparseGamma() float64 {
	// Large enough to leave the caches, as real gradients do.
	const dim, nnz, runs = 4 << 20, 400 << 10, 7
	mk := func(seed uint64) *sparse.Vector[float32] {
		r := rand.New(rand.NewPCG(seed, 7))
		idx := make([]uint32, nnz)
		for i := range idx {
			idx[i] = uint32(r.IntN(dim))
		}
		slices.Sort(idx)
		idx = slices.Compact(idx)
		return &sparse.Vector[float32]{Dim: dim, Indices: idx, Values: make([]float32, len(idx))}
	}
	a, b := mk(1), mk(2)
	var dst sparse.Vector[float32]
	times := make([]float64, runs)
	for i := range times {
		t0 := time.Now()
		if err := sparse.Add(&dst, a, b); err != nil {
			return 1e-8
		}
		times[i] = time.Since(t0).Seconds()
	}
	slices.Sort(times)
	return clamp(times[runs/2]/float64(8*(len(a.Indices)+len(b.Indices))), 1e-12, 1e-7)
}

// measureIndexCodec times the lossless index codec of exact sparse
// messages (quant's index stream, which sparse.AppendEncodePacked writes
// and Decode reads) on 64Ki uniformly spread indices in a dimension of
// 4Mi (about 1.6%, mean gap 64), the best of five encode-decode pairs:
// seconds per index for both sides together (CostModel.IndexCodec).
func measureIndexCodec() float64 {
	const dim, nnz = 4 << 20, 64 << 10
	r := rand.New(rand.NewPCG(3, 7))
	idx := make([]uint32, nnz)
	for i := range idx {
		idx[i] = uint32(r.IntN(dim))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	buf := make([]byte, quant.MaxIndicesSize(len(idx), quant.IndexAuto))
	out := make([]uint32, len(idx))
	best := 1.0
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		enc, err := quant.EncodeIndices(buf, idx, quant.IndexAuto)
		if err == nil {
			_, err = quant.DecodeIndices(out, enc, dim)
		}
		if err != nil {
			return 1e-7
		}
		best = min(best, time.Since(t0).Seconds())
	}
	return clamp(best/float64(len(idx)), 1e-10, 1e-6)
}

func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }
