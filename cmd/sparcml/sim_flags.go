package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/simrun"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport/sim"
)

// simConfig is the parsed command line of `sparcml sim`.
type simConfig struct {
	ranks     []int
	op        string
	sizes     []int
	densities []float64
	dist      string
	algos     []collectives.Algo
	quant     quant.Kind
	indices   collectives.IndexWire
	check     bool
	format    string
	seed      uint64
	plot      string
	memLimit  float64          // GiB: the Go runtime's soft memory limit
	scopes    []compress.Scope // --op compress
	selectM   compress.Method
	machine   sim.Config // Ranks is set per run
	model     collectives.CostModel
}

type simFlagValues struct {
	ranks, sizes, density, algo, quant, indices, topology, compute, calibration, scope, selectMethod string
	rateGbit, latencyUS, overheadUS, gapUS, shmGBps, shmLatencyUS                                    float64
}

func newSimFlags(cfg *simConfig, v *simFlagValues) *flag.FlagSet {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.StringVar(&v.ranks, "n", "8", "simulated ranks: a count, a comma list or MIN:MAX (doubling), e.g. 8:1024")
	fs.StringVar(&cfg.op, "op", "allreduce", "operation: "+strings.Join(simrun.OpNames(), "|"))
	fs.StringVar(&v.sizes, "sizes", "1M", "element counts (float32): MIN:MAX (doubling) or a comma list; K, M, G suffixes (x1024)")
	fs.StringVar(&v.density, "density", "0.01", "sparse ops: fraction(s) of nonzeros per rank, e.g. 0.01,0.1 or 1%")
	fs.StringVar(&v.scope, "scope", "union,global", "with --op compress: union (the exact average of every rank's top-k) and/or global (Ok-Topk's global top-k)")
	fs.StringVar(&v.selectMethod, "select", "exact", "with --op compress: local selection exact|sampled|reuse|random")
	fs.StringVar(&cfg.dist, "dist", "uniform", "sparse ops: index distribution uniform|powerlaw")
	fs.StringVar(&v.algo, "algo", "auto", "comma list of algorithms, or all (auto and every forced algorithm of --op that applies to --topology); dense: auto|ring|rabenseifner|recursive-doubling|hierarchical; sparse: auto|ssar-rd|ssar-split|dsar|allgather")
	fs.StringVar(&v.quant, "quant", "none", "sparse-allreduce and compress value encoding: none|fp16|bf16|q8|q4|q2")
	fs.StringVar(&v.indices, "indices", "auto", "sparse-allreduce with exact values: indices on the wire auto (the cost model's choice)|raw|packed")
	fs.BoolVar(&cfg.check, "check", false, "check every rank's result against the sum computed locally from every rank's seeded input (compress: bench's reference, result and residual)")
	fs.StringVar(&cfg.format, "format", "table", "output: table|json|csv")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the ranks' inputs")
	fs.Float64Var(&v.rateGbit, "rate", 10, "NIC rate in Gbit/s, each direction")
	fs.Float64Var(&v.latencyUS, "latency", 5, "network latency in microseconds (LogGP L)")
	fs.Float64Var(&v.overheadUS, "overhead", 0, "CPU overhead per message in microseconds at each end (LogGP o)")
	fs.Float64Var(&v.gapUS, "gap", 0, "least time between two messages leaving a NIC, microseconds (LogGP g)")
	fs.StringVar(&v.topology, "topology", "flat", "flat (a NIC per rank, full bisection)|hosts (--ranks-per-host share a NIC, shared memory inside)|fattree (hosts under a two-level fat tree)")
	fs.IntVar(&cfg.machine.RanksPerHost, "ranks-per-host", 8, "with --topology hosts or fattree: ranks sharing one NIC")
	fs.Float64Var(&cfg.machine.Oversubscription, "oversubscription", 1, "with --topology fattree: leaf switch downlinks over uplinks")
	fs.IntVar(&cfg.machine.HostsPerSwitch, "hosts-per-switch", 0, "with --topology fattree: hosts per leaf switch (0: the square root of the hosts)")
	fs.Float64Var(&v.shmGBps, "shm-rate", sim.DefaultShmRate/1e9, "shared memory rate within a host, GB/s")
	fs.Float64Var(&v.shmLatencyUS, "shm-latency", sim.DefaultShmLatency*1e6, "shared memory latency within a host, microseconds")
	fs.StringVar(&v.calibration, "calibration", "", "a `sparcml bench --format json` output: the network and kernels of its first row's cost_model replace --rate, --latency and the model's")
	fs.StringVar(&v.compute, "compute", "model", "computation in virtual time: model (bytes over the cost model's kernel rate)|measured (CPU time the kernel took, times --compute-factor)|none")
	fs.Float64Var(&cfg.machine.Compute.Factor, "compute-factor", 1, "with --compute measured: scale of the measured time")
	fs.IntVar(&cfg.machine.Cores, "cores", 0, "CPU cores that every rank's computation and send overhead share, first come first served (the one machine of an emulated cluster); 0: a core per rank")
	fs.Float64Var(&cfg.memLimit, "memory-limit", 16, "GiB: the garbage collector's soft limit (runtime/debug.SetMemoryLimit; 0: the Go default, GOMEMLIMIT or none); it collects harder as the heap nears it instead of letting it grow to twice the live data")
	fs.StringVar(&cfg.plot, "plot", "", "draw simulated time against ranks (log-log) to this file: PNG if its name ends in .png, else SVG")
	fs.SetOutput(io.Discard)
	return fs
}

func parseSimFlags(args []string) (*simConfig, error) {
	cfg := &simConfig{}
	var v simFlagValues
	fs := newSimFlags(cfg, &v)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, errHelp
		}
		return nil, usagef("%v (see sparcml sim -h)", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	op, ok := simrun.Ops[cfg.op]
	if !ok {
		return nil, usagef("unknown --op %q (want %s)", cfg.op, strings.Join(simrun.OpNames(), "|"))
	}
	var err error
	if cfg.ranks, err = parseSizes(v.ranks); err != nil {
		return nil, usagef("-n: %v", err)
	}
	for _, p := range cfg.ranks {
		if p < 1 {
			return nil, usagef("-n: %d ranks", p)
		}
	}
	if cfg.sizes, err = parseSizes(v.sizes); err != nil {
		return nil, usagef("--sizes: %v", err)
	}
	if cfg.densities, err = parseDensities(v.density); err != nil {
		return nil, usagef("--density: %v", err)
	}
	if cfg.quant, err = quant.ParseKind(v.quant); err != nil {
		return nil, usagef("--quant: %v", err)
	}
	found := false
	for _, w := range []collectives.IndexWire{collectives.IndexAuto, collectives.IndexRaw, collectives.IndexPacked} {
		if w.String() == v.indices {
			cfg.indices, found = w, true
		}
	}
	if !found {
		return nil, usagef("unknown --indices %q (want auto|raw|packed)", v.indices)
	}
	if cfg.format != "table" && cfg.format != "json" && cfg.format != "csv" {
		return nil, usagef("unknown --format %q (want table|json|csv)", cfg.format)
	}
	m := &cfg.machine
	m.Rate, m.Latency, m.Overhead, m.Gap = v.rateGbit*1e9/8, v.latencyUS*1e-6, v.overheadUS*1e-6, v.gapUS*1e-6
	m.ShmRate, m.ShmLatency = v.shmGBps*1e9, v.shmLatencyUS*1e-6
	if m.Topology, err = sim.ParseTopology(v.topology); err != nil {
		return nil, usagef("--topology: %v", err)
	}
	if cfg.algos, err = parseSimAlgos(v.algo, op.Algos(m.Topology)); err != nil {
		return nil, err
	}
	if err := parseSimCompress(cfg, v); err != nil {
		return nil, err
	}
	if m.Compute.Mode, err = sim.ParseComputeMode(v.compute); err != nil {
		return nil, usagef("--compute: %v", err)
	}
	if m.Cores < 0 {
		return nil, usagef("--cores %d", m.Cores)
	}
	cfg.model = collectives.DefaultCostModel
	if v.calibration != "" {
		if err := applyCalibration(cfg, v.calibration); err != nil {
			return nil, err
		}
	}
	// The model auto chooses with is the simulated machine's, so that
	// auto against the best forced algorithm judges the formulas, not
	// their parameters.
	cfg.model.Alpha, cfg.model.Beta = m.Latency+2*m.Overhead, 1/m.Rate
	cfg.model.Latency = m.Latency
	if m.Topology != sim.Flat {
		cfg.model.LocalAlpha, cfg.model.LocalBeta = m.ShmLatency, 1/m.ShmRate
	}
	return cfg, nil
}

// parseSimCompress reads --scope and --select (--op compress); its
// --check compares exactly, as bench's does, so it needs --quant none.
func parseSimCompress(cfg *simConfig, v simFlagValues) error {
	cfg.scopes = []compress.Scope{compress.ScopeUnion}
	if cfg.op != "compress" {
		return nil
	}
	if cfg.check && cfg.quant != quant.None {
		return usagef("--op compress --check compares exactly: it needs --quant none")
	}
	var err error
	if cfg.selectM, err = compress.ParseMethod(v.selectMethod); err != nil {
		return usagef("--select: %v", err)
	}
	if cfg.scopes, err = parseScopes(v.scope); err != nil {
		return err
	}
	return nil
}

// parseSimAlgos parses --algo against the op's algorithms on the
// simulated topology (all: those that apply to it).
func parseSimAlgos(s string, valid []collectives.Algo) ([]collectives.Algo, error) {
	if s == "all" {
		return valid, nil
	}
	var algos []collectives.Algo
	for _, name := range strings.Split(s, ",") {
		a, err := collectives.ParseAlgo(strings.TrimSpace(name))
		if err != nil || !slices.Contains(valid, a) {
			return nil, usagef("--algo %q: not an algorithm of this op on this topology (hierarchical needs --topology hosts or fattree)", name)
		}
		if slices.Contains(algos, a) {
			return nil, usagef("--algo names %s twice", name)
		}
		algos = append(algos, a)
	}
	return algos, nil
}

// applyCalibration takes the network and the kernels from the cost_model
// of the first row of a `sparcml bench --format json` output that has one.
func applyCalibration(cfg *simConfig, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usagef("--calibration: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var row struct {
			Model *modelFigures `json:"cost_model"`
		}
		if json.Unmarshal([]byte(line), &row) != nil || row.Model == nil {
			continue
		}
		f := row.Model
		if f.AlphaUS <= 0 || f.BetaGBps <= 0 {
			return usagef("--calibration %s: cost_model without alpha_us and beta_gbps", path)
		}
		cfg.machine.Latency, cfg.machine.Rate = f.AlphaUS*1e-6, f.BetaGBps*1e9
		if f.GammaGBps > 0 {
			cfg.model.Gamma = 1 / (f.GammaGBps * 1e9)
		}
		if f.SparseGammaGBps > 0 {
			cfg.model.SparseGamma = 1 / (f.SparseGammaGBps * 1e9)
		}
		if f.IndexCodecNS > 0 {
			cfg.model.IndexCodec = f.IndexCodecNS * 1e-9
		}
		return nil
	}
	return usagef("--calibration %s: no JSON row with a cost_model", path)
}

const simUsage = `usage: sparcml sim [-n P] [--op OP] [--sizes MIN:MAX] [--algo A,B|all] [flags]

Runs the library's own collective code over a simulated network in virtual
time (transport/sim): deterministic, one process, up to thousands of ranks.
Rows have bench's columns with the simulated time, plus the busiest link's
bytes, the cost model's prediction, auto's choice and the best forced
algorithm's time among those listed.

flags:`
