package main

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sparcml/sparcml"
)

// benchOverlap measures what non-blocking operations buy: per iteration,
// K allreduces of n elements each kept in flight while the rank computes.
// It times communication alone (start K, wait K), compute alone, and both
// overlapped (start K, compute, wait K); each iteration's time is the
// maximum over ranks.
func benchOverlap[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int) ([]result, error) {
	k := cfg.inflight
	bufs := make([][]T, k)
	for i := range bufs {
		bufs[i] = make([]T, n)
		seeded(bufs[i], cfg.seed+uint64(i), c.Rank())
	}
	comm := func() error {
		reqs := make([]*sparcml.Request, k)
		for i, b := range bufs {
			reqs[i] = sparcml.StartAllreduce(ctx, c, b, cfg.redop, sparcml.WithAlgo(cfg.algo))
		}
		for _, r := range reqs {
			if err := r.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	commT, err := timeIters(ctx, c, cfg, comm)
	if err != nil {
		return nil, err
	}
	computeDur := time.Duration(median(commT) * 1e9)
	if cfg.compute != "auto" {
		us, _ := strconv.Atoi(cfg.compute)
		computeDur = time.Duration(us) * time.Microsecond
	}
	// Every rank computes for the same time: rank 0's choice.
	d := []float64{computeDur.Seconds()}
	if err := sparcml.Broadcast(ctx, c, d, 0); err != nil {
		return nil, err
	}
	computeDur = time.Duration(d[0] * 1e9)
	compute := func() error { work(computeDur, cfg.spin); return nil }
	compT, err := timeIters(ctx, c, cfg, compute)
	if err != nil {
		return nil, err
	}
	bothT, err := timeIters(ctx, c, cfg, func() error {
		reqs := make([]*sparcml.Request, k)
		for i, b := range bufs {
			reqs[i] = sparcml.StartAllreduce(ctx, c, b, cfg.redop, sparcml.WithAlgo(cfg.algo))
		}
		work(computeDur, cfg.spin)
		for _, r := range reqs {
			if err := r.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var z T
	sz := 4
	if any(z) == any(float64(0)) {
		sz = 8
	}
	comm1, comp1, both1 := median(commT), median(compT), median(bothT)
	r := result{
		Op: cfg.op, Algo: cfg.algoName, AlgoChosen: cfg.algoName, Transport: c.Transport(), NP: c.Size(), N: n,
		DType: cfg.dtype, Bytes: int64(n * sz * k), Check: "skipped",
		TimeMin: slices.Min(bothT) * 1e6, TimeMedian: both1 * 1e6, TimeMax: slices.Max(bothT) * 1e6,
		Inflight: k, ComputeUS: comp1 * 1e6, CommUS: comm1 * 1e6, OverlapUS: both1 * 1e6,
	}
	if comm1+comp1 > 0 {
		r.OverlapRatio = both1 / (comm1 + comp1)
	}
	if both1 > 0 {
		p := float64(c.Size())
		r.AlgBW = float64(r.Bytes) / both1 / 1e9
		r.BusBW = r.AlgBW * 2 * (p - 1) / p
	}
	return []result{r}, nil
}

// timeIters runs fn warmup+iters times after a barrier each and returns
// the timed iterations' durations in seconds, maximum over ranks.
func timeIters(ctx context.Context, c *sparcml.Comm, cfg *benchConfig, fn func() error) ([]float64, error) {
	times := make([]float64, cfg.iters)
	for it := -cfg.warmup; it < cfg.iters; it++ {
		if err := c.Barrier(ctx); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		if it >= 0 {
			times[it] = time.Since(t0).Seconds()
		}
	}
	if err := sparcml.Allreduce(ctx, c, times, sparcml.Max); err != nil {
		return nil, err
	}
	return times, nil
}

// work stands in for a backward pass: a CPU busy loop (spin) or an idle
// wait (sleep, compute on an accelerator).
func work(d time.Duration, spin bool) {
	if !spin {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			x = math.Sqrt(x + float64(i))
		}
	}
	sink = x
}

var sink float64
