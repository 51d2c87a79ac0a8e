package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
)

// benchSize measures one operation at one size and returns the rows rank 0
// prints (every rank returns the same rows). An iteration's time is the
// maximum over ranks; each iteration starts after a barrier.
func benchSize[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int) ([]result, error) {
	op, err := newBenchOp[T](cfg, c, n)
	if err != nil {
		return nil, err
	}
	// p2p --baseline alternates our iterations with the plain socket's, so
	// that a shared machine's noise hits both alike.
	var raw *rawRun
	if cfg.op == "p2p" && cfg.baseline {
		if raw, err = newRawRun[T](ctx, c, cfg, op); err != nil {
			return nil, fmt.Errorf("raw TCP baseline: %w", err)
		}
		defer raw.rp.close()
	}
	times := make([]float64, cfg.iters)
	ok := true
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
		if raw != nil {
			if err := raw.iteration(ctx, c, it); err != nil {
				return nil, fmt.Errorf("raw TCP baseline: %w", err)
			}
		}
		if it < 0 {
			continue
		}
		algo = a
		times[it] = d.Seconds()
		if cfg.check && !op.verify() {
			ok = false
		}
	}
	sent := float64(c.Stats().Sub(before).BytesSent) / float64(cfg.iters)
	row, err := summarize(ctx, c, cfg, op, times, ok, sent, algo, c.Transport())
	if err != nil {
		return nil, err
	}
	rows := []result{row}
	if raw != nil {
		base, err := summarize(ctx, c, cfg, op, raw.times, true, raw.sent(), collectives.AlgoDirect, "raw-tcp")
		if err != nil {
			return nil, err
		}
		base.Check = "skipped" // the plain socket's bytes are not verified
		rows = append(rows, base)
	}
	return rows, nil
}

// summarize combines every rank's measurements into one row, with one
// small allreduce: the per-iteration times, bytes sent and peak memory
// take their maximum over ranks, the check its minimum (as -max of -ok).
func summarize(ctx context.Context, c *sparcml.Comm, cfg *benchConfig, op benchOp, times []float64, ok bool, sent float64, algo sparcml.Algo, transportName string) (result, error) {
	okv := 0.0
	if ok {
		okv = 1
	}
	agg := append(slices.Clone(times), sent, float64(maxRSS()), -okv)
	if err := sparcml.Allreduce(ctx, c, agg, sparcml.Max); err != nil {
		return result{}, err
	}
	times = agg[:len(times)]
	tail := agg[len(times):]
	agg = tail[:2]
	okAll := []float64{-tail[2]}
	n, bytes, bus := op.size()
	med := median(times)
	r := result{
		Op: cfg.op, Algo: cfg.algoName, AlgoChosen: algo.String(), Transport: transportName,
		NP: c.Size(), N: n, DType: cfg.dtype, Bytes: bytes,
		TimeMin: slices.Min(times) * 1e6, TimeMedian: med * 1e6, TimeMax: slices.Max(times) * 1e6,
		BytesSent: int64(agg[0]), MaxRSS: int64(agg[1]), Check: "skipped",
	}
	if med > 0 {
		r.AlgBW = float64(bytes) / med / 1e9
		r.BusBW = r.AlgBW * bus
	}
	if cfg.check && cfg.op != "barrier" {
		r.Check = "ok"
		if okAll[0] == 0 {
			r.Check = "fail"
		}
	}
	return r, nil
}

// rawRun times the same p2p transfers over a plain socket, one iteration
// after each of ours.
type rawRun struct {
	rp    *rawPair
	buf   []byte
	times []float64
}

func newRawRun[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, op benchOp) (*rawRun, error) {
	p2p := op.(*p2pBench[T])
	rp, err := dialRawPair(ctx, c, cfg.window)
	if err != nil {
		return nil, err
	}
	buf := collectives.AsBytes(p2p.data)
	if buf == nil {
		buf = []byte{}
	}
	return &rawRun{rp: rp, buf: buf, times: make([]float64, cfg.iters)}, nil
}

// iteration runs one timed transfer (it < 0: warm-up) after a barrier.
func (r *rawRun) iteration(ctx context.Context, c *sparcml.Comm, it int) error {
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
	}
	return nil
}

func (r *rawRun) sent() float64 {
	if r.rp != nil && r.rp.sender {
		return float64(len(r.buf) * r.rp.window)
	}
	return 0
}

// reporter prints rows as a table, JSON lines or CSV (rank 0 only).
type reporter struct {
	w      io.Writer
	format string
	active bool
	rows   []result
	header bool
	sparse bool
	cw     *csv.Writer
}

func newReporter(w io.Writer, format string, active bool) *reporter {
	return &reporter{w: w, format: format, active: active}
}

var csvHeader = []string{"op", "algo", "algo_chosen", "transport", "np", "n", "dtype", "bytes",
	"time_us_min", "time_us_median", "time_us_max", "algbw_gbps", "busbw_gbps", "bytes_sent_per_rank", "check", "max_rss_bytes"}

func (r *reporter) row(res result) {
	r.rows = append(r.rows, res)
	if !r.active {
		return
	}
	switch r.format {
	case "json":
		b, _ := json.Marshal(res)
		fmt.Fprintln(r.w, string(b))
	case "csv":
		if r.cw == nil {
			r.cw = csv.NewWriter(r.w)
			r.cw.Write(csvHeader)
		}
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		r.cw.Write([]string{res.Op, res.Algo, res.AlgoChosen, res.Transport, strconv.Itoa(res.NP), strconv.Itoa(res.N),
			res.DType, strconv.FormatInt(res.Bytes, 10), f(res.TimeMin), f(res.TimeMedian), f(res.TimeMax),
			f(res.AlgBW), f(res.BusBW), strconv.FormatInt(res.BytesSent, 10), res.Check, strconv.FormatInt(res.MaxRSS, 10)})
		r.cw.Flush()
	default:
		if res.Inflight > 0 {
			r.overlapRow(res)
			return
		}
		if res.Op == "sparse-allreduce" || res.Op == "sparse-allgather" || r.sparse {
			r.sparseRow(res)
			return
		}
		if !r.header {
			r.header = true
			fmt.Fprintf(r.w, "# sparcml bench: op=%s np=%d dtype=%s transport=%s; times are per iteration, max over ranks\n",
				res.Op, res.NP, res.DType, res.Transport)
			fmt.Fprintf(r.w, "%12s %12s %19s %9s %11s %11s %11s %10s %10s %12s %7s\n", "n", "bytes", "algo", "transport",
				"min_us", "median_us", "max_us", "algbw_GB/s", "busbw_GB/s", "sent/rank", "check")
		}
		fmt.Fprintf(r.w, "%12d %12d %19s %9s %11.1f %11.1f %11.1f %10.3f %10.3f %12d %7s\n",
			res.N, res.Bytes, res.AlgoChosen, res.Transport, res.TimeMin, res.TimeMedian, res.TimeMax,
			res.AlgBW, res.BusBW, res.BytesSent, res.Check)
	}
}

// sparseRow prints sparse rows and the dense rows of --vs-dense among them.
func (r *reporter) sparseRow(res result) {
	if !r.sparse {
		r.sparse = true
		fmt.Fprintf(r.w, "# sparcml bench: op=%s np=%d dtype=%s transport=%s; times per iteration, max over ranks\n",
			res.Op, res.NP, res.DType, res.Transport)
		fmt.Fprintf(r.w, "%10s %8s %11s %18s %11s %11s %11s %12s %12s %9s %7s\n", "n", "density", "nnz_in", "algo",
			"min_us", "median_us", "max_us", "sent/rank", "predicted", "vs_dense", "check")
	}
	speed := ""
	if res.SpeedupVsDense > 0 {
		speed = fmt.Sprintf("%.2fx", res.SpeedupVsDense)
	}
	name := res.AlgoChosen
	if !strings.HasPrefix(res.Op, "sparse-") {
		name = "dense:" + name
	}
	fmt.Fprintf(r.w, "%10d %8.4f %11d %18s %11.1f %11.1f %11.1f %12d %12d %9s %7s\n", res.N, res.Density, res.NNZIn,
		name, res.TimeMin, res.TimeMedian, res.TimeMax, res.BytesSent, res.PredictedBytes, speed, res.Check)
}

func (r *reporter) overlapRow(res result) {
	if !r.header {
		r.header = true
		fmt.Fprintf(r.w, "# sparcml bench overlap: op=%s np=%d dtype=%s transport=%s inflight=%d; medians, max over ranks\n",
			res.Op, res.NP, res.DType, res.Transport, res.Inflight)
		fmt.Fprintf(r.w, "%12s %12s %12s %12s %14s %14s\n", "n", "comm_us", "compute_us", "both_us", "comm+compute", "both/(sum)")
	}
	fmt.Fprintf(r.w, "%12d %12.1f %12.1f %12.1f %14.1f %14.3f\n",
		res.N, res.CommUS, res.ComputeUS, res.OverlapUS, res.CommUS+res.ComputeUS, res.OverlapRatio)
}

func (r *reporter) close() {
	if r.cw != nil {
		r.cw.Flush()
	}
}
