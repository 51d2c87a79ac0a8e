package main

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
)

// benchOverlap measures what non-blocking operations buy: per iteration,
// K allreduces of n elements each kept in flight while the rank computes.
// It times communication alone (start K, wait K), compute alone, and both
// overlapped (start K, compute, wait K); each iteration's time is the
// maximum over ranks. With --check every allreduce of the timed
// iterations of both communicating phases is verified.
func benchOverlap[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int) ([]result, error) {
	o := newOverlap[T](c, cfg, n)
	commT, err := timeIters(ctx, c, cfg, o.prepare, func() error { return o.exchange(ctx, 0) }, o.verify)
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
	compT, err := timeIters(ctx, c, cfg, nil, compute, nil)
	if err != nil {
		return nil, err
	}
	bothT, err := timeIters(ctx, c, cfg, o.prepare, func() error { return o.exchange(ctx, computeDur) }, o.verify)
	if err != nil {
		return nil, err
	}
	return o.rows(ctx, commT, compT, bothT)
}

// overlap is the state of one overlap measurement on this rank: K
// buffers, their inputs and, with --check, their references.
type overlap[T sparcml.Float] struct {
	c      *sparcml.Comm
	cfg    *benchConfig
	n      int
	bufs   [][]T
	inputs [][]T // nil without --check
	refs   [][]T
	algo   sparcml.Algo
	wrong  int64
}

func newOverlap[T sparcml.Float](c *sparcml.Comm, cfg *benchConfig, n int) *overlap[T] {
	o := &overlap[T]{c: c, cfg: cfg, n: n, bufs: make([][]T, cfg.inflight)}
	for i := range o.bufs {
		o.bufs[i] = make([]T, n)
		seeded(o.bufs[i], cfg.seed+uint64(i), c.Rank())
		if cfg.check {
			o.inputs = append(o.inputs, slices.Clone(o.bufs[i]))
			o.refs = append(o.refs, reference[T](n, c.Size(), cfg.seed+uint64(i), cfg.redop))
		}
	}
	return o
}

// prepare restores the inputs the last iteration reduced in place (with
// --check; without it the buffers keep being reduced).
func (o *overlap[T]) prepare() {
	for i, in := range o.inputs {
		copy(o.bufs[i], in)
	}
}

// exchange starts the K allreduces, computes for d (when d > 0) and waits
// for them.
func (o *overlap[T]) exchange(ctx context.Context, d time.Duration) error {
	reqs := make([]*sparcml.Request, len(o.bufs))
	for i, b := range o.bufs {
		reqs[i] = sparcml.StartAllreduce(ctx, o.c, b, o.cfg.redop, sparcml.WithAlgo(o.cfg.algo))
	}
	if d > 0 {
		work(d, o.cfg.spin)
	}
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			return err
		}
	}
	o.algo = reqs[0].Algo()
	return nil
}

// verify counts the wrong elements of the K results.
func (o *overlap[T]) verify() {
	for i, ref := range o.refs {
		o.wrong += countWrong(o.bufs[i], ref, 0, o.cfg.injectWrong)
	}
}

// rows summarizes the three phases' times (seconds per iteration, max
// over ranks) in one row.
func (o *overlap[T]) rows(ctx context.Context, commT, compT, bothT []float64) ([]result, error) {
	wrongAll := []float64{float64(o.wrong)}
	if err := sparcml.Allreduce(ctx, o.c, wrongAll, sparcml.Sum); err != nil {
		return nil, err
	}
	k := len(o.bufs)
	comm1, comp1, both1 := median(commT), median(compT), median(bothT)
	r := newRow(o.cfg, o.c, o.algo, o.c.Transport())
	r.N, r.Bytes = o.n, int64(o.n*collectives.DTypeOf[T]().Size()*k)
	r.setTimes(bothT)
	r.Inflight, r.ComputeUS, r.CommUS, r.OverlapUS = k, comp1*1e6, comm1*1e6, both1*1e6
	if comm1+comp1 > 0 {
		r.OverlapRatio = both1 / (comm1 + comp1)
	}
	p := float64(o.c.Size())
	r.setBandwidth(r.Bytes, 2*(p-1)/p)
	if o.cfg.check {
		r.setWrong(int64(wrongAll[0]))
	}
	return []result{r}, nil
}

// timeIters runs fn warmup+iters times, each after prepare (when not nil)
// and a barrier, calls verify (when not nil) after each timed run, and
// returns the timed iterations' durations in seconds, maximum over ranks.
func timeIters(ctx context.Context, c *sparcml.Comm, cfg *benchConfig, prepare func(), fn func() error, verify func()) ([]float64, error) {
	times := make([]float64, cfg.iters)
	for it := -cfg.warmup; it < cfg.iters; it++ {
		if prepare != nil {
			prepare()
		}
		if err := c.Barrier(ctx); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		if it >= 0 {
			times[it] = time.Since(t0).Seconds()
			if verify != nil {
				verify()
			}
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
