package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/launch"
	"github.com/sparcml/sparcml/quant"
)

// benchConfig is the parsed command line of `sparcml bench`.
type benchConfig struct {
	n         int
	bindTo    string
	op        string
	sizes     []int
	dtype     string
	algo      collectives.Algo
	algoName  string
	redop     sparcml.ReduceOp
	iters     int
	warmup    int
	check     bool
	format    string
	transport string
	seed      uint64
	root      int
	baseline  bool
	window    int
	progress  bool
	densities []float64
	dist      string
	vsDense   bool
	balanced  bool
	quant     sparcml.Quant
	inflight  int
	compute   string // "auto" or microseconds
	spin      bool
	args      []string // the original arguments, for relaunching with -n
}

var benchOps = []string{"allreduce", "reduce-scatter", "allgather", "broadcast", "barrier", "p2p", "sparse-allreduce", "sparse-allgather"}

func parseBenchFlags(args []string) (*benchConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg := &benchConfig{}
	fs.IntVar(&cfg.n, "n", 0, "launch N local ranks (without -n: join the job described by the environment)")
	fs.StringVar(&cfg.bindTo, "bind-to", "none", "with -n: core binds rank r to one CPU (as mpirun --bind-to core), none leaves placement to the kernel")
	fs.StringVar(&cfg.op, "op", "allreduce", "operation: "+strings.Join(benchOps, "|"))
	sizes := fs.String("sizes", "1K:16M", "element counts: MIN:MAX (doubling) or a comma list; K, M, G suffixes (x1024)")
	fs.StringVar(&cfg.dtype, "dtype", "float32", "element type: float32|float64")
	fs.StringVar(&cfg.algoName, "algo", "auto", "algorithm: auto|ring|rabenseifner|recursive-doubling; sparse: auto|ssar-rd|ssar-split|dsar|allgather")
	redop := fs.String("reduce", "sum", "reduction for allreduce and reduce-scatter: sum|min|max")
	fs.IntVar(&cfg.iters, "iters", 20, "timed iterations per size")
	fs.IntVar(&cfg.warmup, "warmup", 5, "untimed iterations per size")
	fs.BoolVar(&cfg.check, "check", false, "verify every result against the reference computed from all ranks' seeded inputs")
	fs.StringVar(&cfg.format, "format", "table", "output: table|json|csv")
	fs.StringVar(&cfg.transport, "transport", "auto", "transport: auto|tcp|rdma")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the ranks' inputs")
	fs.IntVar(&cfg.root, "root", 0, "root rank of broadcast")
	fs.BoolVar(&cfg.baseline, "baseline", false, "with --op p2p: also time a plain TCP socket copy between the same two processes")
	fs.IntVar(&cfg.window, "window", 1, "with --op p2p: messages in flight per iteration, acknowledged once per window (1: one message and its acknowledgement, a round trip per message; perftest's ib_write_bw streams with --tx-depth writes in flight)")
	density := fs.String("density", "0.01", "sparse ops: fraction(s) of nonzeros per rank, e.g. 0.01,0.1 or 1%")
	fs.StringVar(&cfg.dist, "dist", "uniform", "sparse ops: index distribution uniform|powerlaw")
	fs.BoolVar(&cfg.vsDense, "vs-dense", false, "sparse-allreduce: also time the dense allreduce of the same n and report the speedup")
	fs.BoolVar(&cfg.balanced, "balanced", false, "sparse-allreduce: index ranges balanced by where the nonzeros are")
	quantName := fs.String("quant", "none", "value encoding of allreduce and sparse-allreduce: none|fp16|bf16|q8|q4|q2")
	fs.IntVar(&cfg.inflight, "inflight", 0, "overlap mode: keep K operations in flight while each rank computes, and report compute alone, communication alone and both")
	fs.StringVar(&cfg.compute, "compute", "auto", "with --inflight: compute time per iteration in microseconds, or auto (= the communication time)")
	computeMode := fs.String("compute-mode", "spin", "with --inflight: spin (a CPU busy loop) or sleep (compute on an accelerator, CPU idle)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(os.Stdout)
			fmt.Println("usage: sparcml bench [flags]")
			fs.PrintDefaults()
			os.Exit(0)
		}
		return nil, usagef("%v (see sparcml bench -h)", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	if !slices.Contains(benchOps, cfg.op) {
		return nil, usagef("unknown --op %q (want %s)", cfg.op, strings.Join(benchOps, "|"))
	}
	var err error
	if cfg.sizes, err = parseSizes(*sizes); err != nil {
		return nil, usageError{err}
	}
	if cfg.dtype != "float32" && cfg.dtype != "float64" {
		return nil, usagef("unknown --dtype %q (want float32|float64)", cfg.dtype)
	}
	if _, err := parseBindTo(cfg.bindTo); err != nil {
		return nil, err
	}
	if cfg.algo, err = collectives.ParseAlgo(cfg.algoName); err != nil {
		return nil, usagef("--algo: %v", err)
	}
	switch *redop {
	case "sum":
		cfg.redop = sparcml.Sum
	case "min":
		cfg.redop = sparcml.Min
	case "max":
		cfg.redop = sparcml.Max
	default:
		return nil, usagef("unknown --reduce %q (want sum|min|max)", *redop)
	}
	if cfg.iters < 1 || cfg.warmup < 0 {
		return nil, usagef("--iters must be >= 1 and --warmup >= 0")
	}
	if cfg.format != "table" && cfg.format != "json" && cfg.format != "csv" {
		return nil, usagef("unknown --format %q (want table|json|csv)", cfg.format)
	}
	if cfg.transport != "auto" && cfg.transport != "tcp" && cfg.transport != "rdma" {
		return nil, usagef("unknown --transport %q (want auto|tcp|rdma)", cfg.transport)
	}
	if cfg.densities, err = parseDensities(*density); err != nil {
		return nil, usageError{err}
	}
	if cfg.dist != "uniform" && cfg.dist != "powerlaw" {
		return nil, usagef("unknown --dist %q (want uniform|powerlaw)", cfg.dist)
	}
	if cfg.quant, err = quant.ParseKind(*quantName); err != nil {
		return nil, usagef("--quant: %v", err)
	}
	if cfg.quant != sparcml.QuantNone && cfg.op != "allreduce" && cfg.op != "sparse-allreduce" {
		return nil, usagef("--quant works with --op allreduce or sparse-allreduce")
	}
	switch *computeMode {
	case "spin":
		cfg.spin = true
	case "sleep":
	default:
		return nil, usagef("unknown --compute-mode %q (want spin|sleep)", *computeMode)
	}
	if cfg.window < 1 {
		return nil, usagef("--window must be >= 1")
	}
	if cfg.window > 1 && cfg.op != "p2p" {
		return nil, usagef("--window works with --op p2p")
	}
	if cfg.inflight < 0 {
		return nil, usagef("--inflight must be >= 0")
	}
	if cfg.inflight > 0 && cfg.op != "allreduce" {
		return nil, usagef("--inflight works with --op allreduce")
	}
	if cfg.compute != "auto" {
		if v, err := strconv.Atoi(cfg.compute); err != nil || v < 0 {
			return nil, usagef("--compute %q: want microseconds or auto", cfg.compute)
		}
	}
	cfg.args = args
	return cfg, nil
}

// parseSizes reads "MIN:MAX" (doubling from MIN to MAX) or "a,b,c", with
// K/M/G meaning x1024, x1024^2, x1024^3.
func parseSizes(s string) ([]int, error) {
	if lo, hi, ok := strings.Cut(s, ":"); ok {
		min, err := parseCount(lo)
		if err != nil {
			return nil, err
		}
		max, err := parseCount(hi)
		if err != nil {
			return nil, err
		}
		if max < min {
			return nil, fmt.Errorf("--sizes %q: MAX < MIN", s)
		}
		var out []int
		if min == 0 {
			out = append(out, 0)
			min = 1
		}
		for n := min; n <= max; n *= 2 {
			out = append(out, n)
		}
		return out, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := parseCount(part)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1
	switch {
	case strings.HasSuffix(s, "K") || strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G") || strings.HasSuffix(s, "g"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad element count %q (want e.g. 1024, 64K, 16M)", s)
	}
	return v * mult, nil
}

func benchCmd(args []string) error {
	cfg, err := parseBenchFlags(args)
	if err != nil {
		return err
	}
	if cfg.n > 0 {
		return relaunch(cfg)
	}
	cfg.progress = os.Getenv("SPARCML_PROGRESS") == "1" || isTerminal(os.Stderr)
	return runBench(cfg)
}

// relaunch starts N local ranks of this same binary running the same
// benchmark without -n.
func relaunch(cfg *benchConfig) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var args []string
	skip := false
	for _, a := range cfg.args {
		switch {
		case skip:
			skip = false
		case a == "-n" || a == "--n":
			skip = true
		case strings.HasPrefix(a, "-n=") || strings.HasPrefix(a, "--n="):
		default:
			args = append(args, a)
		}
	}
	env := []string{}
	if isTerminal(os.Stderr) {
		env = append(env, "SPARCML_PROGRESS=1")
	}
	if os.Getenv("SPARCML_LOG") == "" {
		env = append(env, "SPARCML_LOG=off")
	}
	bind, _ := parseBindTo(cfg.bindTo) // checked when parsing
	return launch.Run(context.Background(), launch.Config{
		N: cfg.n, Program: self, Args: append([]string{"bench"}, args...),
		Env: env, Stdout: os.Stdout, Stderr: os.Stderr, Prefix: false,
		BindCores: bind,
	})
}

func runBench(cfg *benchConfig) error {
	ctx := context.Background()
	comm, err := sparcml.Init(ctx, sparcml.WithTransport(cfg.transport))
	if err != nil {
		return err
	}
	defer comm.Close()
	if stop, err := startCPUProfile(comm.Rank()); err != nil {
		return err
	} else {
		defer stop()
	}
	out := newReporter(os.Stdout, cfg.format, comm.Rank() == 0)
	var p progress
	if cfg.progress && comm.Rank() == 0 {
		p = progress{w: os.Stderr, total: len(cfg.sizes)}
	}
	if strings.HasPrefix(cfg.op, "sparse-") {
		p.total *= len(cfg.densities)
		return runSparseBench(ctx, comm, cfg, out, p)
	}
	for i, n := range cfg.sizes {
		p.show(i, cfg.op, n)
		var res []result
		var err error
		switch {
		case cfg.inflight > 0 && cfg.dtype == "float32":
			res, err = benchOverlap[float32](ctx, comm, cfg, n)
		case cfg.inflight > 0:
			res, err = benchOverlap[float64](ctx, comm, cfg, n)
		case cfg.dtype == "float32":
			res, err = benchSize[float32](ctx, comm, cfg, n)
		default:
			res, err = benchSize[float64](ctx, comm, cfg, n)
		}
		if err != nil {
			p.clear()
			return err
		}
		p.clear()
		for _, r := range res {
			out.row(r)
		}
	}
	out.close()
	for _, r := range out.rows {
		if r.Check == "fail" {
			return fmt.Errorf("result check failed for %s n=%d", r.Op, r.N)
		}
	}
	return nil
}

func runSparseBench(ctx context.Context, comm *sparcml.Comm, cfg *benchConfig, out *reporter, p progress) error {
	i := 0
	for _, n := range cfg.sizes {
		for _, d := range cfg.densities {
			p.show(i, cfg.op, n)
			i++
			var res []result
			var err error
			if cfg.dtype == "float32" {
				res, err = benchSparse[float32](ctx, comm, cfg, n, d)
			} else {
				res, err = benchSparse[float64](ctx, comm, cfg, n, d)
			}
			p.clear()
			if err != nil {
				return err
			}
			for _, r := range res {
				out.row(r)
			}
		}
	}
	out.close()
	for _, r := range out.rows {
		if r.Check == "fail" {
			return fmt.Errorf("result check failed for %s n=%d density %g", r.Op, r.N, r.Density)
		}
	}
	return nil
}

// progress shows "[i/total] op n=..." on a terminal, overwritten in place.
type progress struct {
	w     io.Writer
	total int
}

func (p progress) show(i int, op string, n int) {
	if p.w != nil {
		fmt.Fprintf(p.w, "\r\033[K[%d/%d] %s n=%d ...", i+1, p.total, op, n)
	}
}

func (p progress) clear() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count), 0 for none.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startCPUProfile writes a CPU profile of this rank to
// $SPARCML_CPUPROFILE.rank<R> when that variable is set, for finding where
// a benchmark's time goes (go tool pprof bin/sparcml FILE), and where its
// memory is allocated to $SPARCML_MEMPROFILE.rank<R> (go tool pprof
// -sample_index=alloc_space), and an execution trace, which shows every
// goroutine and thread wake-up, to $SPARCML_TRACE.rank<R> (go tool trace;
// the timed part of each iteration is a region, "sparcml" or "raw-tcp").
func startCPUProfile(rank int) (stop func(), err error) {
	if prefix := os.Getenv("SPARCML_MEMPROFILE"); prefix != "" {
		return func() {
			if f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, rank)); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}, nil
	}
	if prefix := os.Getenv("SPARCML_TRACE"); prefix != "" {
		return recordTo(prefix, rank, trace.Start, trace.Stop)
	}
	if prefix := os.Getenv("SPARCML_CPUPROFILE"); prefix != "" {
		return recordTo(prefix, rank, pprof.StartCPUProfile, pprof.StopCPUProfile)
	}
	return func() {}, nil
}

// recordTo starts a recording (a CPU profile, an execution trace) into
// the file prefix.rank<R> and returns what stops it and closes the file.
func recordTo(prefix string, rank int, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, rank))
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}
