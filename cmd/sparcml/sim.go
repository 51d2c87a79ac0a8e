package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/simrun"
)

// simResult is one row of `sparcml sim`: bench's row, its times the
// simulated time, and what only a simulation knows.
type simResult struct {
	result
	SimTimeUS        float64 `json:"sim_time_us"`
	BusiestLink      string  `json:"busiest_link"`
	BusiestLinkBytes int64   `json:"busiest_link_bytes"`
	BestForcedAlgo   string  `json:"best_forced_algo,omitempty"`
	BestForcedUS     float64 `json:"best_forced_us,omitempty"`
	Topology         string  `json:"topology"`
	Compute          string  `json:"compute"`
	Cores            int     `json:"cores,omitempty"`
	RateGbit         float64 `json:"rate_gbit"`
	LatencyUS        float64 `json:"latency_us"`
	WallSeconds      float64 `json:"-"` // machine time: not part of the deterministic output
}

func simCmd(args []string) error {
	cfg, err := parseSimFlags(args)
	if err == errHelp {
		fmt.Println(simUsage)
		printFlags(os.Stdout, newSimFlags(&simConfig{}, &simFlagValues{}), nil)
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.memLimit > 0 {
		debug.SetMemoryLimit(int64(cfg.memLimit * (1 << 30)))
	}
	out := newSimReporter(os.Stdout, cfg.format)
	rows, err := runSim(cfg, out.rows)
	out.close()
	if err != nil {
		return err
	}
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, rows); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Wrong != nil && *r.Wrong > 0 {
			return fmt.Errorf("%s %s on %d ranks at n=%d: %d wrong elements", r.Op, r.Algo, r.NP, r.N, *r.Wrong)
		}
	}
	return nil
}

// runSim simulates every case of cfg: each count of ranks, size and
// density, every listed algorithm; emit gets each case's rows as soon as
// they are known (a long sweep prints as it goes).
func runSim(cfg *simConfig, emit func([]simResult) error) ([]simResult, error) {
	densities := cfg.densities
	if cfg.op == "allreduce" {
		densities = []float64{0}
	}
	var rows []simResult
	for _, p := range cfg.ranks {
		for _, n := range cfg.sizes {
			for _, d := range densities {
				caseRows, err := simCase(cfg, p, n, d)
				if err != nil {
					return nil, err
				}
				if err := emit(caseRows); err != nil {
					return nil, err
				}
				rows = append(rows, caseRows...)
			}
		}
	}
	return rows, nil
}

// simCase runs every algorithm (and with --op compress every scope, the
// global one once) of one case and marks the best forced one.
func simCase(cfg *simConfig, p, n int, d float64) ([]simResult, error) {
	machine := cfg.machine
	machine.Ranks = p
	var rows []simResult
	best := -1
	for _, scope := range cfg.scopes {
		algos := cfg.algos
		if scope == compress.ScopeGlobal {
			algos = []collectives.Algo{collectives.AlgoAuto}
		}
		for _, a := range algos {
			c := simrun.Case{Op: cfg.op, N: n, Density: d, Dist: cfg.dist, Algo: a, Quant: cfg.quant, Indices: cfg.indices, Seed: cfg.seed,
				Model: cfg.model, Scope: scope, Select: cfg.selectM}
			res, err := simrun.Run(machine, c, cfg.check)
			if err != nil {
				return nil, fmt.Errorf("%s %v on %d ranks at n=%d: %w", cfg.op, a, p, n, err)
			}
			row := simRow(cfg, c, machine.Ranks, res)
			if a != collectives.AlgoAuto && scope == compress.ScopeUnion && (best < 0 || row.SimTimeUS < rows[best].SimTimeUS) {
				best = len(rows)
			}
			rows = append(rows, row)
			runtime.GC() // the next case starts from the memory this one freed
		}
	}
	if best >= 0 {
		for i := range rows {
			rows[i].BestForcedAlgo, rows[i].BestForcedUS = rows[best].AlgoChosen, rows[best].SimTimeUS
		}
	}
	return rows, nil
}

func simRow(cfg *simConfig, c simrun.Case, p int, res simrun.Result) simResult {
	us := res.Seconds * 1e6
	r := result{Op: c.Op, Algo: c.Algo.String(), AlgoChosen: res.Algo.String(), Transport: "sim", NP: p, N: c.N,
		DType: "float32", Bytes: 4 * int64(c.N), TimeMin: us, TimeMedian: us, TimeMax: us, TimeAvg: us,
		BytesSent: res.MaxBytesSent, Check: "off", Redop: "sum", Root: -1}
	if res.Seconds > 0 {
		r.AlgBW = float64(r.Bytes) / res.Seconds / 1e9
		r.BusBW = r.AlgBW * 2 * float64(p-1) / float64(p)
	}
	if res.Wrong >= 0 {
		w := res.Wrong
		r.Wrong = &w
		r.Check = "ok"
		if w > 0 {
			r.Check = "FAIL"
		}
	}
	var predicted int64
	for _, b := range res.PredictedB {
		predicted = max(predicted, b)
	}
	r.PredictedBytes, r.PredictedUS = predicted, res.Predicted*1e6
	if math.IsInf(r.PredictedUS, 0) {
		r.PredictedUS = 0 // no formula for this case
	}
	if c.Op != "allreduce" {
		r.Density = c.Density
	}
	if c.Op == "compress" {
		r.Algo, r.Scope, r.Select, r.Redop = c.Scope.String(), c.Scope.String(), c.Select.String(), "avg"
		if c.Scope == compress.ScopeUnion && c.Algo != collectives.AlgoAuto {
			r.Algo = "union:" + c.Algo.String()
		}
		r.K, r.Kept, r.NNZOut = res.K, float64(res.Kept), res.Kept
		r.NNZIn = int(res.Selected / int64(p))
		r.BoundBytes = int64(6 * float64(res.K) * float64(p-1) / float64(p) * 8)
	}
	r.Model = &modelFigures{AlphaUS: cfg.model.Alpha * 1e6, BetaGBps: 1 / cfg.model.Beta / 1e9,
		GammaGBps: 1 / cfg.model.Gamma / 1e9, SparseGammaGBps: 1 / cfg.model.SparseGammaOrDefault() / 1e9}
	return simResult{result: r, SimTimeUS: us, BusiestLink: res.Busiest.Name, BusiestLinkBytes: res.Busiest.Bytes,
		Topology: cfg.machine.Topology.String(), Compute: cfg.machine.Compute.Mode.String(),
		Cores: cfg.machine.Cores, RateGbit: cfg.machine.Rate * 8 / 1e9, LatencyUS: cfg.machine.Latency * 1e6}
}
