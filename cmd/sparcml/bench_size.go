package main

import (
	"context"
	"fmt"
	"runtime/trace"
	"slices"
	"time"

	"github.com/sparcml/sparcml"
)

// benchSize measures one operation at one size and returns the rows rank 0
// prints (every rank returns the same rows). An iteration's time is the
// maximum over ranks; each iteration starts after a barrier.
func benchSize[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int) ([]result, error) {
	op, err := newBenchOp[T](cfg, c, n)
	if err != nil {
		return nil, err
	}
	return measure[T](ctx, c, cfg, op)
}

// measure times op: cfg.warmup untimed iterations, then cfg.iters timed
// ones, each verified with --check.
func measure[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, op benchOp) ([]result, error) {
	// p2p --baseline alternates our iterations with the plain socket's, so
	// that a shared machine's noise hits both alike.
	var raw *rawRun
	if cfg.op == "p2p" && cfg.baseline {
		var err error
		if raw, err = newRawRun[T](ctx, c, cfg, op); err != nil {
			return nil, fmt.Errorf("raw TCP baseline: %w", err)
		}
		defer raw.rp.close()
	}
	times := make([]float64, cfg.iters)
	var wrong int64
	var algo sparcml.Algo
	before := c.Stats()
	for it := -cfg.warmup; it < cfg.iters; it++ {
		op.prepare()
		if err := c.Barrier(ctx); err != nil {
			return nil, err
		}
		if it == 0 {
			before = c.Stats()
		}
		region := trace.StartRegion(ctx, "sparcml")
		t0 := time.Now()
		a, err := op.run(ctx)
		d := time.Since(t0)
		region.End()
		if err != nil {
			return nil, err
		}
		if it >= 0 {
			algo = a
			times[it] = d.Seconds()
			// Before the baseline's transfer, which lands in the same
			// buffer.
			if cfg.check {
				wrong += op.verify(cfg.injectWrong)
			}
		}
		if raw != nil {
			if err := raw.iteration(ctx, c, it); err != nil {
				return nil, fmt.Errorf("raw TCP baseline: %w", err)
			}
		}
	}
	sent := float64(c.Stats().Sub(before).BytesSent) / float64(cfg.iters)
	row, err := summarize(ctx, c, cfg, op, times, wrong, sent, algo, c.Transport())
	if err != nil {
		return nil, err
	}
	rows := []result{row}
	if raw != nil {
		base, err := summarize(ctx, c, cfg, op, raw.times, raw.wrong, raw.sent(), sparcml.AlgoDirect, "raw-tcp")
		if err != nil {
			return nil, err
		}
		rows = append(rows, base)
	}
	return rows, nil
}

// summarize combines every rank's measurements into one row: the
// per-iteration times, bytes sent and peak memory take their maximum over
// ranks, the wrong elements their sum.
func summarize(ctx context.Context, c *sparcml.Comm, cfg *benchConfig, op benchOp, times []float64, wrong int64, sent float64, algo sparcml.Algo, transportName string) (result, error) {
	agg := append(slices.Clone(times), sent, float64(maxRSS()))
	if err := sparcml.Allreduce(ctx, c, agg, sparcml.Max); err != nil {
		return result{}, err
	}
	wrongAll := []float64{float64(wrong)} // exact below 2^53
	if err := sparcml.Allreduce(ctx, c, wrongAll, sparcml.Sum); err != nil {
		return result{}, err
	}
	times = agg[:len(times)]
	n, bytes, bus := op.size()
	r := newRow(cfg, c, algo, transportName)
	r.N, r.Bytes = n, bytes
	r.setTimes(times)
	r.BytesSent, r.MaxRSS = int64(agg[len(times)]), int64(agg[len(times)+1])
	r.setBandwidth(bytes, bus)
	if cfg.check && cfg.op != "barrier" {
		r.setWrong(int64(wrongAll[0]))
	}
	return r, nil
}

// newRow starts a row of op's configuration; its check is "skipped"
// until setWrong.
func newRow(cfg *benchConfig, c *sparcml.Comm, algo sparcml.Algo, transportName string) result {
	r := result{
		Op: cfg.op, Algo: cfg.algoName, AlgoChosen: algo.String(), Transport: transportName,
		NP: c.Size(), DType: cfg.dtype, Check: "skipped", Redop: "none", Root: -1, Model: figuresOf(c),
	}
	if slices.Contains(reducingOps, cfg.op) {
		r.Redop = cfg.redop.String()
	}
	if slices.Contains(rootedOps, cfg.op) {
		r.Root = cfg.root
	}
	return r
}

// setTimes sets the row's min, mean, median and max from the iterations'
// times in seconds.
func (r *result) setTimes(times []float64) {
	sum := 0.0
	for _, t := range times {
		sum += t
	}
	r.TimeMin, r.TimeMax = slices.Min(times)*1e6, slices.Max(times)*1e6
	r.TimeMedian, r.TimeAvg = median(times)*1e6, sum/float64(len(times))*1e6
}

// setBandwidth sets algbw and busbw (nccl-tests' definitions) from the
// bytes that define the operation's size and the median time.
func (r *result) setBandwidth(bytes int64, busFactor float64) {
	if r.TimeMedian > 0 {
		r.AlgBW = float64(bytes) / (r.TimeMedian * 1e-6) / 1e9
		r.BusBW = r.AlgBW * busFactor
	}
}

// setWrong records a check's outcome: ok when no element was wrong.
func (r *result) setWrong(wrong int64) {
	r.Wrong = &wrong
	r.Check = "ok"
	if wrong != 0 {
		r.Check = "fail"
	}
}

// rawRun times the same p2p transfers over a plain socket, one iteration
// after each of ours, and with --check verifies what they delivered.
type rawRun struct {
	rp    *rawPair
	buf   []byte
	times []float64
	wrong int64
	// clear empties the receiver's buffer before a checked transfer and
	// verify counts its wrong elements after it (nil without --check).
	clear  func()
	verify func() int64
}

func newRawRun[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, op benchOp) (*rawRun, error) {
	p2p := op.(*p2pBench[T])
	rp, err := dialRawPair(ctx, c, cfg.window)
	if err != nil {
		return nil, err
	}
	buf := rawBytes(p2p.data)
	if buf == nil {
		buf = []byte{}
	}
	r := &rawRun{rp: rp, buf: buf, times: make([]float64, cfg.iters)}
	if cfg.check && p2p.ref != nil {
		r.clear = func() { clear(p2p.data) }
		r.verify = func() int64 { return countWrong(p2p.data, p2p.ref, 0, cfg.injectWrong) }
	}
	return r, nil
}

// iteration runs one timed transfer (it < 0: warm-up) after a barrier. It
// lands in the buffer of the receive of ours just verified, cleared first
// so that the check sees what the socket delivered.
func (r *rawRun) iteration(ctx context.Context, c *sparcml.Comm, it int) error {
	if r.clear != nil {
		r.clear()
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	region := trace.StartRegion(ctx, "raw-tcp")
	t0 := time.Now()
	err := r.rp.transfer(r.buf)
	region.End()
	if err != nil {
		return err
	}
	if it >= 0 {
		r.times[it] = time.Since(t0).Seconds()
		if r.verify != nil {
			r.wrong += r.verify()
		}
	}
	return nil
}

func (r *rawRun) sent() float64 {
	if r.rp != nil && r.rp.sender {
		return float64(len(r.buf) * r.rp.window)
	}
	return 0
}
