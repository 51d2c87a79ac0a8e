package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/startup"
)

// benchConfig is the parsed command line of `sparcml bench`.
type benchConfig struct {
	n         int
	bindTo    string
	op        string
	sizes     []int // element counts (from --sizes, or --bytes divided by the element size)
	dtype     string
	algo      sparcml.Algo
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
	progress  progressFlag
	// cpuProfile, memProfile and execTrace are file prefixes: each rank
	// writes PREFIX.rankR.
	cpuProfile, memProfile, execTrace string
	densities                         []float64
	dist                              string
	vsDense                           bool
	balanced                          bool
	block                             int // sparse-allreduce: values per index (row width)
	quant                             sparcml.Quant
	indices                           sparcml.IndexWire
	inflight                          int
	compute                           string // "auto" or microseconds
	spin                              bool
	// injectWrong is the hidden --inject-wrong test hook: every rank
	// perturbs the first K elements of each result it checks, so that
	// tests can see a wrong result reported as one.
	injectWrong int
	args        []string // the original arguments, for relaunching with -n
	// algos and algoNames are --algo's list: several only with --op
	// sparse-allreduce; algo and algoName are its first.
	algos     []sparcml.Algo
	algoNames []string
	// --op compress: the scopes (taking turns like --algo's list), the
	// selection method and the global scope's exact period.
	scopes       []compress.Scope
	selectMethod compress.Method
	globalPeriod int
}

// autoTensor is the --algo name of AlgoAuto on a named tensor
// (sparcml.WithTensor): calls reuse the decision of a counts exchange.
const autoTensor = "auto-tensor"

var benchOps = []string{"allreduce", "reduce-scatter", "allgather", "broadcast", "barrier", "p2p", "sparse-allreduce", "sparse-allgather", "compress"}

// reducingOps take --redop; rootedOps take --root.
var (
	reducingOps = []string{"allreduce", "reduce-scatter", "sparse-allreduce"}
	rootedOps   = []string{"broadcast"}
)

// hiddenBenchFlags are accepted but not listed by -h: an old spelling
// and a test hook.
var hiddenBenchFlags = []string{"reduce", "inject-wrong"}

// benchFlagValues holds the flags that need parsing after flag.Parse.
type benchFlagValues struct {
	sizes, bytes, redop, density, quant, computeMode, indices, scope, selectMethod string
}

// newBenchFlags declares every flag of `sparcml bench` with its default.
func newBenchFlags(cfg *benchConfig, v *benchFlagValues) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 0, "launch N local ranks (without -n: join the job described by the environment)")
	fs.StringVar(&cfg.bindTo, "bind-to", "none", "with -n: core binds rank r to one CPU (as mpirun --bind-to core), none leaves placement to the kernel")
	fs.StringVar(&cfg.op, "op", "allreduce", "operation: "+strings.Join(benchOps, "|"))
	fs.StringVar(&v.sizes, "sizes", "1K:16M", "element counts: MIN:MAX (doubling) or a comma list; K, M, G suffixes (x1024); 0 runs the operation on empty buffers")
	fs.StringVar(&v.bytes, "bytes", "", "sizes in bytes instead of --sizes, as nccl-tests' -b/-e: MIN:MAX (doubling) or a comma list, e.g. 8:128M; each a multiple of the element size")
	fs.StringVar(&cfg.dtype, "dtype", "float32", "element type: float32|float64")
	fs.StringVar(&cfg.algoName, "algo", "auto", "algorithm: auto|ring|rabenseifner|recursive-doubling; sparse: auto|auto-tensor|ssar-rd|ssar-split|dsar|allgather (auto-tensor: auto on a named tensor, which reuses its counts exchange's decision); sparse-allreduce takes a comma list, whose algorithms alternate iteration by iteration")
	fs.StringVar(&v.redop, "redop", "sum", "reduction of allreduce and reduce-scatter (sum|avg|min|max) and of sparse-allreduce (sum|avg)")
	fs.StringVar(&v.redop, "reduce", "sum", "the old name of --redop")
	fs.IntVar(&cfg.root, "root", 0, "root rank of broadcast")
	fs.IntVar(&cfg.iters, "iters", 20, "timed iterations per size")
	fs.IntVar(&cfg.warmup, "warmup", 5, "untimed iterations per size")
	fs.BoolVar(&cfg.check, "check", false, "verify every timed iteration's result on every rank against the reference computed from all ranks' seeded inputs, in every mode; a wrong element fails the run")
	fs.StringVar(&cfg.format, "format", "table", "output: table|json|csv")
	fs.StringVar(&cfg.transport, "transport", "", "transport: auto|shm|tcp|rdma (default: SPARCML_TRANSPORT, else auto: shared memory within a host, RDMA or TCP between hosts)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the ranks' inputs")
	fs.BoolVar(&cfg.baseline, "baseline", false, "with --op p2p: also time a plain TCP socket copy between the same two processes")
	fs.IntVar(&cfg.window, "window", 1, "with --op p2p: messages in flight per iteration, acknowledged once per window (1: one message and its acknowledgement, a round trip per message; perftest's ib_write_bw streams with --tx-depth writes in flight)")
	fs.StringVar(&v.density, "density", "0.01", "sparse ops: fraction(s) of nonzeros per rank, e.g. 0.01,0.1 or 1%")
	fs.StringVar(&cfg.dist, "dist", "uniform", "sparse ops: index distribution uniform|powerlaw")
	fs.BoolVar(&cfg.vsDense, "vs-dense", false, "sparse-allreduce: also time the dense allreduce of the same vectors and report the speedup")
	fs.IntVar(&cfg.block, "block", 1, "sparse-allreduce: values per index: a row-sparse matrix of --sizes rows of this width (an embedding gradient), --density the fraction of rows; a row travels as one index and its values")
	fs.BoolVar(&cfg.balanced, "balanced", false, "sparse-allreduce: index ranges balanced by where the nonzeros are")
	fs.StringVar(&v.quant, "quant", "none", "value encoding of allreduce and sparse-allreduce (with --redop sum or avg): none|fp16|bf16|q8|q4|q2")
	fs.StringVar(&v.indices, "indices", "auto", "sparse-allreduce with exact values: indices on the wire auto (the cost model's choice)|raw|packed (lossless delta and bit-packing)")
	fs.StringVar(&v.scope, "scope", "union,global", "with --op compress: union (the exact sum of every rank's top-k) and/or global (Ok-Topk's global top-k), a comma list taking turns iteration by iteration")
	fs.StringVar(&v.selectMethod, "select", "exact", "with --op compress: local selection exact|sampled|reuse|random")
	fs.IntVar(&cfg.globalPeriod, "global-period", 0, "with --op compress --scope global: steps an exact global threshold serves (0: the library's default)")
	fs.IntVar(&cfg.inflight, "inflight", 0, "overlap mode: keep K operations in flight while each rank computes, and report compute alone, communication alone and both")
	fs.StringVar(&cfg.compute, "compute", "auto", "with --inflight: compute time per iteration in microseconds, or auto (= the communication time)")
	fs.StringVar(&v.computeMode, "compute-mode", "spin", "with --inflight: spin (a CPU busy loop) or sleep (compute on an accelerator, CPU idle)")
	fs.Var(&cfg.progress, "progress", progressUsage)
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write each rank's CPU profile to PREFIX.rankR (go tool pprof)")
	fs.StringVar(&cfg.memProfile, "memprofile", "", "write each rank's allocation profile to PREFIX.rankR (go tool pprof -sample_index=alloc_space)")
	fs.StringVar(&cfg.execTrace, "trace", "", "write each rank's Go execution trace to PREFIX.rankR (go tool trace; not the SPARCML_DEBUG=TRACE log level)")
	fs.IntVar(&cfg.injectWrong, "inject-wrong", 0, "test hook: perturb the first K elements of every checked result")
	fs.SetOutput(io.Discard)
	return fs
}

// printFlags lists fs's flags, except the hidden ones, as -h shows them.
func printFlags(w io.Writer, fs *flag.FlagSet, hidden []string) {
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(hidden, f.Name) {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  " + dashed(f.Name)
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

// dashed spells a flag as the documentation does: -n, --sizes (the flag
// package accepts either number of dashes).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagNames lists fs's visible flags as "--a, --b, ..." for the
// top-level usage.
func flagNames(fs *flag.FlagSet, hidden []string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(hidden, f.Name) {
			names = append(names, dashed(f.Name))
		}
	})
	return strings.Join(names, " ")
}

// errHelp is returned for -h: the caller prints the usage and exits 0.
var errHelp = flag.ErrHelp

func parseBenchFlags(args []string) (*benchConfig, error) {
	cfg := &benchConfig{}
	var v benchFlagValues
	fs := newBenchFlags(cfg, &v)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, errHelp
		}
		return nil, usagef("%v (see sparcml bench -h)", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	if !slices.Contains(benchOps, cfg.op) {
		return nil, usagef("unknown --op %q (want %s)", cfg.op, strings.Join(benchOps, "|"))
	}
	if cfg.dtype != "float32" && cfg.dtype != "float64" {
		return nil, usagef("unknown --dtype %q (want float32|float64)", cfg.dtype)
	}
	var err error
	if cfg.sizes, err = benchSizes(v, set, cfg.dtype); err != nil {
		return nil, err
	}
	if _, err := parseBindTo(cfg.bindTo); err != nil {
		return nil, err
	}
	if err := parseAlgos(cfg); err != nil {
		return nil, err
	}
	if cfg.redop, err = sparcml.ParseReduceOp(v.redop); err != nil {
		return nil, usagef("--redop: %v", err)
	}
	if (set["redop"] || set["reduce"]) && !slices.Contains(reducingOps, cfg.op) {
		return nil, usagef("--redop works with --op %s", strings.Join(reducingOps, "|"))
	}
	if set["root"] && !slices.Contains(rootedOps, cfg.op) {
		return nil, usagef("--root works with --op %s", strings.Join(rootedOps, "|"))
	}
	if cfg.op == "sparse-allreduce" && cfg.redop != sparcml.Sum && cfg.redop != sparcml.Avg {
		return nil, usagef("--op sparse-allreduce reduces with sum or avg, not --redop %v", cfg.redop)
	}
	if cfg.iters < 1 || cfg.warmup < 0 {
		return nil, usagef("--iters must be >= 1 and --warmup >= 0")
	}
	if cfg.format != "table" && cfg.format != "json" && cfg.format != "csv" {
		return nil, usagef("unknown --format %q (want table|json|csv)", cfg.format)
	}
	if _, err := startup.ParseTransport(cfg.transport); err != nil {
		return nil, usagef("unknown --transport %q (want %s)", cfg.transport, strings.Join(startup.TransportNames(), "|"))
	}
	if cfg.densities, err = parseDensities(v.density); err != nil {
		return nil, usageError{err}
	}
	if cfg.dist != "uniform" && cfg.dist != "powerlaw" {
		return nil, usagef("unknown --dist %q (want uniform|powerlaw)", cfg.dist)
	}
	if cfg.quant, err = sparcml.ParseQuant(v.quant); err != nil {
		return nil, usagef("--quant: %v", err)
	}
	if cfg.quant != sparcml.QuantNone && cfg.op != "allreduce" && cfg.op != "sparse-allreduce" && cfg.op != "compress" {
		return nil, usagef("--quant works with --op allreduce, sparse-allreduce or compress")
	}
	if err := parseCompressFlags(cfg, v, set); err != nil {
		return nil, err
	}
	if cfg.quant != sparcml.QuantNone && cfg.redop != sparcml.Sum && cfg.redop != sparcml.Avg {
		return nil, usagef("--quant works with --redop sum or avg, not %v", cfg.redop)
	}
	if cfg.indices, err = sparcml.ParseIndexWire(v.indices); err != nil {
		return nil, usagef("--indices: %v", err)
	}
	if cfg.block < 1 || cfg.block > 1<<20 || cfg.block > 1 && (cfg.op != "sparse-allreduce" || cfg.quant != sparcml.QuantNone) {
		return nil, usagef("--block %d: a width in [1, 2^20], with --op sparse-allreduce and --quant none", cfg.block)
	}
	if cfg.indices != sparcml.IndexAuto && cfg.op != "sparse-allreduce" {
		return nil, usagef("--indices works with --op sparse-allreduce")
	}
	switch v.computeMode {
	case "spin":
		cfg.spin = true
	case "sleep":
	default:
		return nil, usagef("unknown --compute-mode %q (want spin|sleep)", v.computeMode)
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
	if cfg.injectWrong < 0 {
		return nil, usagef("--inject-wrong must be >= 0")
	}
	for name, prefix := range map[string]string{"cpuprofile": cfg.cpuProfile, "memprofile": cfg.memProfile, "trace": cfg.execTrace} {
		if err := checkPrefix(prefix); err != nil {
			return nil, usagef("--%s: %v", name, err)
		}
	}
	cfg.args = args
	return cfg, nil
}

// benchSizes returns the element counts of --sizes, or of --bytes divided
// by the element size of dtype.
func benchSizes(v benchFlagValues, set map[string]bool, dtype string) ([]int, error) {
	if set["sizes"] && set["bytes"] {
		return nil, usagef("give --sizes (element counts) or --bytes (bytes), not both")
	}
	if !set["bytes"] {
		sizes, err := parseSizes(v.sizes)
		if err != nil {
			return nil, usagef("--sizes: %v", err)
		}
		return sizes, nil
	}
	bytes, err := parseSizes(v.bytes)
	if err != nil {
		return nil, usagef("--bytes: %v", err)
	}
	esz := 4
	if dtype == "float64" {
		esz = 8
	}
	counts := make([]int, len(bytes))
	for i, b := range bytes {
		if b%esz != 0 {
			return nil, usagef("--bytes %q: %d bytes is not a whole number of %s elements (%d bytes each)", v.bytes, b, dtype, esz)
		}
		counts[i] = b / esz
	}
	return counts, nil
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
			return nil, fmt.Errorf("%q: MAX < MIN", s)
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

// parseCount reads a non-negative count with an optional K, M or G
// suffix (x1024, x1024^2, x1024^3).
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	num, mult := s, 1
	switch {
	case strings.HasSuffix(s, "K") || strings.HasSuffix(s, "k"):
		mult, num = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m"):
		mult, num = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G") || strings.HasSuffix(s, "g"):
		mult, num = 1<<30, s[:len(s)-1]
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 0 || v > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 1024, 64K, 16M)", s)
	}
	return v * mult, nil
}

// parseAlgos reads --algo: one algorithm, or with --op sparse-allreduce a
// comma list of distinct ones.
func parseAlgos(cfg *benchConfig) error {
	cfg.algos, cfg.algoNames = nil, nil
	for _, name := range strings.Split(cfg.algoName, ",") {
		name = strings.TrimSpace(name)
		a, err := sparcml.ParseAlgo(name)
		if name == autoTensor && cfg.op == "sparse-allreduce" {
			a, err = sparcml.AlgoAuto, nil
		}
		if err != nil {
			return usagef("--algo: %v", err)
		}
		if slices.Contains(cfg.algoNames, name) {
			return usagef("--algo names %s twice", name)
		}
		cfg.algos, cfg.algoNames = append(cfg.algos, a), append(cfg.algoNames, name)
	}
	if len(cfg.algos) > 1 && cfg.op != "sparse-allreduce" {
		return usagef("--algo takes a list only with --op sparse-allreduce")
	}
	cfg.algo, cfg.algoName = cfg.algos[0], cfg.algoNames[0]
	return nil
}

// checkPrefix checks that the directory of a file prefix exists, so that
// a typing mistake shows at start-up, not when a long benchmark ends.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	dir := filepath.Dir(prefix)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("directory %s does not exist", strconv.Quote(dir))
	}
	return nil
}

// parseCompressFlags reads --scope, --select and --global-period, which
// only --op compress takes. Its --check compares exactly, so it needs
// exact values: with a lossy --quant the global selection is made on the
// decoded sums, which the reference cannot reproduce bit for bit.
func parseCompressFlags(cfg *benchConfig, v benchFlagValues, set map[string]bool) error {
	if cfg.op != "compress" {
		for _, f := range []string{"scope", "select", "global-period"} {
			if set[f] {
				return usagef("--%s works with --op compress", f)
			}
		}
		return nil
	}
	if set["redop"] || set["reduce"] {
		return usagef("--op compress averages; it takes no --redop")
	}
	if cfg.check && cfg.quant != sparcml.QuantNone {
		return usagef("--op compress --check compares exactly: it needs --quant none")
	}
	if cfg.globalPeriod < 0 {
		return usagef("--global-period must be >= 0")
	}
	var err error
	if cfg.selectMethod, err = compress.ParseMethod(v.selectMethod); err != nil {
		return usagef("--select: %v", err)
	}
	if cfg.scopes, err = parseScopes(v.scope); err != nil {
		return err
	}
	cfg.redop = sparcml.Avg
	return nil
}

// parseScopes reads --scope: a comma list of compression scopes, each
// named once, that bench and sim take in turns.
func parseScopes(list string) ([]compress.Scope, error) {
	var scopes []compress.Scope
	for _, name := range strings.Split(list, ",") {
		s, err := compress.ParseScope(strings.TrimSpace(name))
		if err != nil {
			return nil, usagef("--scope: %v", err)
		}
		if slices.Contains(scopes, s) {
			return nil, usagef("--scope names %v twice", s)
		}
		scopes = append(scopes, s)
	}
	return scopes, nil
}
