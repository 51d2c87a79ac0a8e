package sparcml

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/sparcml/sparcml/collectives"
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
	model := []float64{0, 0, 0}
	switch c.Rank() {
	case 0:
		alpha, beta, err := pingPong(ctx, c, 1, true)
		if err != nil {
			return err
		}
		model[0], model[1], model[2] = alpha, beta, measureGamma()
	case 1:
		if _, _, err := pingPong(ctx, c, 0, false); err != nil {
			return err
		}
	}
	if err := Broadcast(ctx, c, model, 0); err != nil {
		return err
	}
	m := collectives.CostModel{Alpha: model[0], Beta: model[1], Gamma: model[2]}
	if m.Alpha <= 0 || m.Beta <= 0 || m.Gamma <= 0 {
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
	transfers := make([]float64, 0, 5)
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		if initiator {
			if err = Send(ctx, c, big, peer); err == nil {
				err = Recv(ctx, c, empty, peer)
			}
		} else if err = Recv(ctx, c, big, peer); err == nil {
			err = Send(ctx, c, empty, peer)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("calibrate: %w", err)
		}
		transfers = append(transfers, time.Since(t0).Seconds())
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

func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }
