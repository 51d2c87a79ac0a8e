package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sparcml/sparcml"
)

// result is one row of the benchmark's output. Times are in
// microseconds, bandwidths in GB/s (10^9 bytes per second), sizes in
// bytes; docs/CLI.md documents every field.
type result struct {
	Op         string  `json:"op"`
	Algo       string  `json:"algo"`
	AlgoChosen string  `json:"algo_chosen"`
	Transport  string  `json:"transport"`
	NP         int     `json:"np"`
	N          int     `json:"n"`
	DType      string  `json:"dtype"`
	Bytes      int64   `json:"bytes"`
	TimeMin    float64 `json:"time_us_min"`
	TimeMedian float64 `json:"time_us_median"`
	TimeMax    float64 `json:"time_us_max"`
	AlgBW      float64 `json:"algbw_gbps"`
	BusBW      float64 `json:"busbw_gbps"`
	BytesSent  int64   `json:"bytes_sent_per_rank"`
	Check      string  `json:"check"`
	MaxRSS     int64   `json:"max_rss_bytes"`

	// Redop is the reduction ("none" for operations without one) and
	// Root the root rank (-1 for operations without one), as nccl-tests
	// print them. TimeAvg is the mean iteration time. Wrong counts the
	// elements that differed from the reference, summed over ranks and
	// timed iterations; nil (JSON null) when the results were not checked.
	Redop   string  `json:"redop"`
	Root    int     `json:"root"`
	TimeAvg float64 `json:"time_us_avg"`
	Wrong   *int64  `json:"wrong"`

	// Sparse operations.
	Density        float64 `json:"density,omitempty"`
	NNZIn          int     `json:"nnz_in,omitempty"`
	NNZOut         int     `json:"nnz_out,omitempty"`
	PredictedBytes int64   `json:"predicted_bytes_per_rank,omitempty"`
	PredictedUS    float64 `json:"predicted_us,omitempty"` // the model's time from the counts, counts exchange left out
	Indices        string  `json:"indices,omitempty"`      // exact sparse allreduce: raw or packed, as rank 0 sent them
	SpeedupVsDense float64 `json:"speedup_vs_dense,omitempty"`

	// Compressor (--op compress): the scope and selection method, the
	// count asked for (K), the entries of the result (mean over the timed
	// iterations; nnz_out is the last one's) and Ok-Topk's bound on the
	// bytes a rank sends, 6K(P-1)/P entries of a 4-byte index and a value.
	Scope      string  `json:"scope,omitempty"`
	Select     string  `json:"select,omitempty"`
	K          int     `json:"k,omitempty"`
	Kept       float64 `json:"kept,omitempty"`
	BoundBytes int64   `json:"bound_bytes_per_rank,omitempty"`

	// Model is the cost model the job calibrated at start-up.
	Model *modelFigures `json:"cost_model,omitempty"`

	// Overlap mode (--inflight): median times of communication alone,
	// compute alone and both overlapped, and overlapped / (comm + compute).
	Inflight     int     `json:"inflight,omitempty"`
	ComputeUS    float64 `json:"compute_us,omitempty"`
	CommUS       float64 `json:"comm_us,omitempty"`
	OverlapUS    float64 `json:"overlap_us,omitempty"`
	OverlapRatio float64 `json:"overlap_ratio,omitempty"`
}

// modelFigures are a cost model's parameters in the units the docs quote.
type modelFigures struct {
	AlphaUS         float64 `json:"alpha_us"`
	BetaGBps        float64 `json:"beta_gbps"`
	GammaGBps       float64 `json:"gamma_gbps"`
	SparseGammaGBps float64 `json:"sparse_gamma_gbps"`
	IndexCodecNS    float64 `json:"index_codec_ns"`
}

// figuresOf is the cost model c calibrated.
func figuresOf(c *sparcml.Comm) *modelFigures {
	m := c.CostModel()
	perSec := func(secsPerByte float64) float64 {
		if secsPerByte <= 0 {
			return 0 // not calibrated: the default stands in
		}
		return significant(1/secsPerByte/1e9, 4)
	}
	return &modelFigures{AlphaUS: significant(m.Alpha*1e6, 4), BetaGBps: perSec(m.Beta), GammaGBps: perSec(m.Gamma),
		SparseGammaGBps: perSec(m.SparseGamma), IndexCodecNS: significant(m.IndexCodec*1e9, 4)}
}

// benchOp is one operation at one size on this rank.
type benchOp interface {
	// prepare restores the inputs an iteration may have overwritten.
	prepare()
	// run performs one iteration and returns the algorithm used.
	run(ctx context.Context) (sparcml.Algo, error)
	// verify compares this rank's result with the reference and returns
	// the number of elements that differ. It first perturbs the first
	// inject elements of the result (the hidden --inject-wrong test hook).
	verify(inject int) int64
	// size is the element count actually used, the bytes that define
	// algorithm bandwidth, and the nccl-tests bus bandwidth factor.
	size() (n int, bytes int64, busFactor float64)
}

// seeded fills dst with rank's input: small integers in [-4, 4], so sums
// over any number of ranks and in any order are exact in float32.
func seeded[T sparcml.Float](dst []T, seed uint64, rank int) {
	x := seed*0x9E3779B97F4A7C15 + uint64(rank+1)*0xBF58476D1CE4E5B9
	for i := range dst {
		x += 0x9E3779B97F4A7C15
		z := x
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		dst[i] = T(int(z%9) - 4)
	}
}

// reference reduces every rank's seeded input of length n with red.
func reference[T sparcml.Float](n, size int, seed uint64, red sparcml.ReduceOp) []T {
	ref := make([]T, n)
	tmp := make([]T, n)
	seeded(ref, seed, 0)
	for r := 1; r < size; r++ {
		seeded(tmp, seed, r)
		for i, v := range tmp {
			switch red {
			case sparcml.Sum, sparcml.Avg:
				ref[i] += v
			case sparcml.Min:
				ref[i] = min(ref[i], v)
			case sparcml.Max:
				ref[i] = max(ref[i], v)
			}
		}
	}
	averaged(ref, red, size)
	return ref
}

// averaged finishes a reference sum of p ranks for Avg: the exact sum of
// the bench's small integers divided once, as the library does.
func averaged[T sparcml.Float](ref []T, red sparcml.ReduceOp, p int) {
	if red != sparcml.Avg {
		return
	}
	for i := range ref {
		ref[i] /= T(p)
	}
}

// countWrong perturbs the first inject elements of got, then returns how
// many elements differ from want by more than tol (every element counts
// when the lengths differ; NaN is always wrong).
func countWrong[T sparcml.Float](got, want []T, tol float64, inject int) int64 {
	for i := range min(inject, len(got)) {
		got[i] += 1 + T(tol)
	}
	if len(got) != len(want) {
		return int64(max(len(got), len(want)))
	}
	var wrong int64
	for i := range got {
		if d := float64(got[i]) - float64(want[i]); d > tol || d < -tol || d != d {
			wrong++
		}
	}
	return wrong
}

func newBenchOp[T sparcml.Float](cfg *benchConfig, c *sparcml.Comm, n int) (benchOp, error) {
	p, r := c.Size(), c.Rank()
	var z T
	sz := int64(4)
	if any(z) == any(float64(0)) {
		sz = 8
	}
	switch cfg.op {
	case "allreduce":
		o := &allreduceBench[T]{cfg: cfg, c: c, data: make([]T, n), sz: sz, tol: quantTolerance(cfg.quant, p, cfg.redop)}
		seeded(o.data, cfg.seed, r)
		if cfg.check {
			o.input = append([]T(nil), o.data...)
			o.ref = reference[T](n, p, cfg.seed, cfg.redop)
		}
		return o, nil
	case "reduce-scatter":
		m := n / p
		o := &reduceScatterBench[T]{cfg: cfg, c: c, in: make([]T, m*p), out: make([]T, m), sz: sz}
		seeded(o.in, cfg.seed, r)
		if cfg.check {
			o.ref = reference[T](m*p, p, cfg.seed, cfg.redop)[r*m : (r+1)*m]
		}
		return o, nil
	case "allgather":
		m := n / p
		o := &allgatherBench[T]{cfg: cfg, c: c, in: make([]T, m), out: make([]T, m*p), sz: sz}
		seeded(o.in, cfg.seed, r)
		if cfg.check {
			o.ref = make([]T, m*p)
			for q := 0; q < p; q++ {
				seeded(o.ref[q*m:(q+1)*m], cfg.seed, q)
			}
		}
		return o, nil
	case "broadcast":
		if cfg.root < 0 || cfg.root >= p {
			return nil, fmt.Errorf("--root %d out of range [0,%d)", cfg.root, p)
		}
		o := &broadcastBench[T]{cfg: cfg, c: c, data: make([]T, n), sz: sz}
		if cfg.check {
			o.ref = make([]T, n)
			seeded(o.ref, cfg.seed, cfg.root)
		}
		return o, nil
	case "barrier":
		return &barrierBench{c: c}, nil
	case "p2p":
		o := &p2pBench[T]{cfg: cfg, c: c, data: make([]T, n), sz: sz, peer: -1, window: cfg.window}
		switch {
		case r%2 == 0 && r+1 < p:
			o.peer, o.sender = r+1, true
			seeded(o.data, cfg.seed, r)
		case r%2 == 1:
			o.peer = r - 1
			// Every message of a window lands in a buffer of its own.
			o.bufs = [][]T{o.data}
			for range cfg.window - 1 {
				o.bufs = append(o.bufs, make([]T, n))
			}
			if cfg.check {
				o.ref = make([]T, n)
				seeded(o.ref, cfg.seed, r-1)
			}
		}
		return o, nil
	}
	return nil, fmt.Errorf("unknown op %q", cfg.op)
}

type allreduceBench[T sparcml.Float] struct {
	cfg              *benchConfig
	c                *sparcml.Comm
	data, input, ref []T
	tol              float64 // the low-precision encodings' error bound
	sz               int64
}

func (o *allreduceBench[T]) prepare() {
	if o.input != nil {
		copy(o.data, o.input)
	}
}

func (o *allreduceBench[T]) run(ctx context.Context) (sparcml.Algo, error) {
	req := sparcml.StartAllreduce(ctx, o.c, o.data, o.cfg.redop, sparcml.WithAlgo(o.cfg.algo), sparcml.WithQuant(o.cfg.quant))
	err := req.Wait(ctx)
	return req.Algo(), err
}

func (o *allreduceBench[T]) verify(inject int) int64 { return countWrong(o.data, o.ref, o.tol, inject) }

// quantTolerance bounds the error of a low-precision sum of the bench's
// inputs (integers in [-4, 4] on p ranks); 0 for exact values. fp16 and
// bf16 hold such small integers and their sums exactly, and an average
// divides the decoded sum as the reference divides the exact one. A
// stochastic rounding moves a value by at most one step, scale/s with
// s = 2^(b-1)-1 levels and scale at most the bucket's largest magnitude:
// 4 for each of the p contributions and 4p for the quantized result, so
// |error| <= (4p + 4p)/s, divided by p for an average (plus the two
// divisions' roundings).
func quantTolerance(k sparcml.Quant, p int, red sparcml.ReduceOp) float64 {
	var s float64
	switch k {
	case sparcml.QuantQ8:
		s = 127
	case sparcml.QuantQ4:
		s = 7
	case sparcml.QuantQ2:
		s = 1
	default:
		return 0
	}
	tol := 8 * float64(p) / s * (1 + 1e-6)
	if red == sparcml.Avg {
		tol = tol/float64(p) + 1e-5
	}
	return tol
}

func (o *allreduceBench[T]) size() (int, int64, float64) {
	p := float64(o.c.Size())
	return len(o.data), int64(len(o.data)) * o.sz, 2 * (p - 1) / p
}

type reduceScatterBench[T sparcml.Float] struct {
	cfg          *benchConfig
	c            *sparcml.Comm
	in, out, ref []T
	sz           int64
}

func (o *reduceScatterBench[T]) prepare() {}

func (o *reduceScatterBench[T]) run(ctx context.Context) (sparcml.Algo, error) {
	req := sparcml.StartReduceScatter(ctx, o.c, o.in, o.out, o.cfg.redop, sparcml.WithAlgo(o.cfg.algo))
	err := req.Wait(ctx)
	return req.Algo(), err
}

func (o *reduceScatterBench[T]) verify(inject int) int64 { return countWrong(o.out, o.ref, 0, inject) }

func (o *reduceScatterBench[T]) size() (int, int64, float64) {
	p := float64(o.c.Size())
	return len(o.in), int64(len(o.in)) * o.sz, (p - 1) / p
}

type allgatherBench[T sparcml.Float] struct {
	cfg          *benchConfig
	c            *sparcml.Comm
	in, out, ref []T
	sz           int64
}

func (o *allgatherBench[T]) prepare() { clear(o.out) }

func (o *allgatherBench[T]) run(ctx context.Context) (sparcml.Algo, error) {
	req := sparcml.StartAllgather(ctx, o.c, o.in, o.out, sparcml.WithAlgo(o.cfg.algo))
	err := req.Wait(ctx)
	return req.Algo(), err
}

func (o *allgatherBench[T]) verify(inject int) int64 { return countWrong(o.out, o.ref, 0, inject) }

func (o *allgatherBench[T]) size() (int, int64, float64) {
	p := float64(o.c.Size())
	return len(o.out), int64(len(o.out)) * o.sz, (p - 1) / p
}

type broadcastBench[T sparcml.Float] struct {
	cfg       *benchConfig
	c         *sparcml.Comm
	data, ref []T
	sz        int64
}

func (o *broadcastBench[T]) prepare() {
	if o.cfg.check {
		// Non-roots start from their own data so a missing delivery shows.
		seeded(o.data, o.cfg.seed, o.c.Rank())
	}
}

func (o *broadcastBench[T]) run(ctx context.Context) (sparcml.Algo, error) {
	req := sparcml.StartBroadcast(ctx, o.c, o.data, o.cfg.root, sparcml.WithAlgo(o.cfg.algo))
	err := req.Wait(ctx)
	return req.Algo(), err
}

func (o *broadcastBench[T]) verify(inject int) int64 { return countWrong(o.data, o.ref, 0, inject) }

func (o *broadcastBench[T]) size() (int, int64, float64) {
	return len(o.data), int64(len(o.data)) * o.sz, 1
}

type barrierBench struct{ c *sparcml.Comm }

func (o *barrierBench) prepare() {}
func (o *barrierBench) run(ctx context.Context) (sparcml.Algo, error) {
	return sparcml.AlgoDirect, o.c.Barrier(ctx)
}
func (o *barrierBench) verify(int) int64            { return 0 }
func (o *barrierBench) size() (int, int64, float64) { return 0, 0, 0 }

// p2pBench sends from each even rank to the next odd rank: a window of
// messages (--window, default 1) all in flight at once, which the
// receiver acknowledges with one empty message, so the sender's time
// covers their delivery. With a window of 1 that is a round trip per
// message; a larger one streams, as perftest's ib_write_bw does with
// --tx-depth writes outstanding. The bytes of a row are the window's.
type p2pBench[T sparcml.Float] struct {
	cfg       *benchConfig
	c         *sparcml.Comm
	data, ref []T
	bufs      [][]T // receiver: one buffer per message of the window
	sz        int64
	peer      int
	sender    bool
	window    int
	ack       []T
	pending   []*sparcml.Request
	sends     []*sparcml.Request
}

// prepare posts this iteration's receives before the barrier, as a real
// pipeline-parallel job posts its receives ahead, so the payload lands in
// the buffer directly instead of waiting as an unexpected message.
func (o *p2pBench[T]) prepare() {
	if o.peer < 0 {
		return
	}
	ctx := context.Background()
	o.pending = o.pending[:0]
	if o.sender {
		o.pending = append(o.pending, sparcml.StartRecv(ctx, o.c, o.ack, o.peer))
		return
	}
	for _, b := range o.bufs {
		if o.ref != nil {
			clear(b)
		}
		o.pending = append(o.pending, sparcml.StartRecv(ctx, o.c, b, o.peer))
	}
}

func (o *p2pBench[T]) run(ctx context.Context) (sparcml.Algo, error) {
	if o.peer < 0 {
		return sparcml.AlgoDirect, nil
	}
	if o.sender {
		if o.window == 1 {
			if err := sparcml.Send(ctx, o.c, o.data, o.peer); err != nil {
				return 0, err
			}
		} else {
			o.sends = o.sends[:0]
			for range o.window {
				o.sends = append(o.sends, sparcml.StartSend(ctx, o.c, o.data, o.peer))
			}
			if err := sparcml.WaitAll(ctx, o.sends...); err != nil {
				return 0, err
			}
		}
		return sparcml.AlgoDirect, o.pending[0].Wait(ctx)
	}
	// As osu_bw does with MPI_Waitall: one wait for the whole window.
	if err := sparcml.WaitAll(ctx, o.pending...); err != nil {
		return 0, err
	}
	return sparcml.AlgoDirect, sparcml.Send(ctx, o.c, o.ack, o.peer)
}

func (o *p2pBench[T]) verify(inject int) int64 {
	if o.ref == nil {
		return 0 // a sender, or a rank without a peer
	}
	var wrong int64
	for _, b := range o.bufs {
		wrong += countWrong(b, o.ref, 0, inject)
	}
	return wrong
}

func (o *p2pBench[T]) size() (int, int64, float64) {
	return len(o.data), int64(len(o.data)) * o.sz * int64(o.window), 1
}

// rawPair is the baseline of --op p2p --baseline: a plain Go TCP socket
// between the same two processes over loopback, same protocol (a window
// of messages, then a one-byte acknowledgement).
type rawPair struct {
	conn   net.Conn
	sender bool
	window int
}

// dialRawPair connects even rank r to r+1 with a plain socket; the port
// travels over the communicator.
func dialRawPair(ctx context.Context, c *sparcml.Comm, window int) (*rawPair, error) {
	r, p := c.Rank(), c.Size()
	port := []float64{0}
	switch {
	case r%2 == 1:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		port[0] = float64(ln.Addr().(*net.TCPAddr).Port)
		if err := sparcml.Send(ctx, c, port, r-1); err != nil {
			return nil, err
		}
		conn, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		return &rawPair{conn: conn, window: window}, nil
	case r+1 < p:
		if err := sparcml.Recv(ctx, c, port, r+1); err != nil {
			return nil, err
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", int(port[0])), 10*time.Second)
		if err != nil {
			return nil, err
		}
		return &rawPair{conn: conn, sender: true, window: window}, nil
	}
	return nil, nil
}

func (rp *rawPair) transfer(buf []byte) error {
	if rp == nil {
		return nil
	}
	ack := []byte{0}
	if rp.sender {
		for range rp.window {
			if _, err := rp.conn.Write(buf); err != nil {
				return err
			}
		}
		_, err := io.ReadFull(rp.conn, ack)
		return err
	}
	for range rp.window {
		if _, err := io.ReadFull(rp.conn, buf); err != nil {
			return err
		}
	}
	_, err := rp.conn.Write(ack)
	return err
}

func (rp *rawPair) close() {
	if rp != nil {
		rp.conn.Close()
	}
}
