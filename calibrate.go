package sparcml

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
)

// calibrate measures the cost model's parameters for this job at start-up,
// so AlgoAuto chooses with this network's latency and bandwidth rather than
// a guess: ranks 0 and 1 time small round trips (alpha) and a 4 MiB
// transfer (beta), rank 0 times a local reduction (gamma), and rank 0's
// figures are broadcast so every rank holds the same model and makes the
// same choices. SPARCML_CALIBRATE=0 keeps the defaults.
func (c *Comm) calibrate(ctx context.Context) error {
	if c.Size() < 2 || os.Getenv("SPARCML_CALIBRATE") == "0" {
		return nil
	}
	// Reduction speeds are measured on every rank at once, so ranks
	// sharing cores see the contention a real run sees; the slowest
	// counts.
	gammas := []float64{measureGamma(), measureSparseGamma()}
	if err := Allreduce(ctx, c, gammas, Max); err != nil {
		return err
	}
	model := []float64{0, 0, gammas[0], gammas[1]}
	switch c.Rank() {
	case 0:
		alpha, beta, err := pingPong(ctx, c, 1, true)
		if err != nil {
			return err
		}
		model[0], model[1] = alpha, beta
	case 1:
		if _, _, err := pingPong(ctx, c, 0, false); err != nil {
			return err
		}
	}
	if err := Broadcast(ctx, c, model, 0); err != nil {
		return err
	}
	m := collectives.CostModel{Alpha: model[0], Beta: model[1], Gamma: model[2], SparseGamma: model[3]}
	if m.Alpha <= 0 || m.Beta <= 0 || m.Gamma <= 0 || m.SparseGamma <= 0 {
		return fmt.Errorf("calibration gave an unusable model %+v", m)
	}
	c.model = m
	return nil
}

const (
	calibrateRounds = 20
	calibrateBytes  = 4 << 20
)

// pingPong runs between two ranks; the initiator returns alpha (half the
// median empty round trip) and beta (seconds per byte of a one-way 4 MiB
// transfer beyond its latency), clamped to sane ranges.
func pingPong(ctx context.Context, c *Comm, peer int, initiator bool) (alpha, beta float64, err error) {
	empty := []float32{}
	big := make([]float32, calibrateBytes/4)
	rtts := make([]float64, 0, calibrateRounds)
	for i := 0; i < calibrateRounds; i++ {
		t0 := time.Now()
		if initiator {
			if err = Send(ctx, c, empty, peer); err == nil {
				err = Recv(ctx, c, empty, peer)
			}
		} else if err = Recv(ctx, c, empty, peer); err == nil {
			err = Send(ctx, c, empty, peer)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("calibrate: %w", err)
		}
		rtts = append(rtts, time.Since(t0).Seconds())
	}
	// Large transfers into a receive posted in advance (as collectives
	// post theirs), so the figure is the wire's, not an unexpected
	// message's extra copy: the responder posts, says ready, receives and
	// acknowledges; the initiator times send plus acknowledgement.
	transfers := make([]float64, 0, 7)
	for i := 0; i < 7; i++ {
		if initiator {
			if err = Recv(ctx, c, empty, peer); err != nil {
				return 0, 0, fmt.Errorf("calibrate: %w", err)
			}
			t0 := time.Now()
			if err = Send(ctx, c, big, peer); err == nil {
				err = Recv(ctx, c, empty, peer)
			}
			transfers = append(transfers, time.Since(t0).Seconds())
		} else {
			req := StartRecv(ctx, c, big, peer)
			if err = Send(ctx, c, empty, peer); err == nil {
				if err = req.Wait(ctx); err == nil {
					err = Send(ctx, c, empty, peer)
				}
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("calibrate: %w", err)
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

// measureGamma times a dense float32 sum: seconds per byte reduced.
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
// with: a merge of two vectors of 64Ki random entries each in a dimension
// of 4Mi. Seconds per byte of entries (index and value) merged.
func measureSparseGamma() float64 {
	// 10% of 4Mi: large enough to leave the caches, as real gradients do.
	const dim, nnz = 4 << 20, 400 << 10
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
	best := 1.0
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		if err := sparse.Add(&dst, a, b); err != nil {
			return 1e-8
		}
		best = min(best, time.Since(t0).Seconds())
	}
	return clamp(best/float64(8*(len(a.Indices)+len(b.Indices))), 1e-12, 1e-7)
}

func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }
