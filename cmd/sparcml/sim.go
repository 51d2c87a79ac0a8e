package main

import (
	"fmt"
	"math"
	"os"
	"runtime"

	"github.com/sparcml/sparcml/collectives"
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
	out := newSimReporter(os.Stdout, cfg.format)
	rows, err := runSim(cfg, out.rows)
	out.close()
	if err != nil {
		return err
	}
	if cfg.plot != "" {
		if err := os.WriteFile(cfg.plot, plotSVG(rows), 0o644); err != nil {
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
	if cfg.op != "sparse-allreduce" {
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

// simCase runs every algorithm of one case and marks the best forced one.
func simCase(cfg *simConfig, p, n int, d float64) ([]simResult, error) {
	machine := cfg.machine
	machine.Ranks = p
	var rows []simResult
	best := -1
	for _, a := range cfg.algos {
		c := simrun.Case{Op: cfg.op, N: n, Density: d, Dist: cfg.dist, Algo: a, Quant: cfg.quant, Indices: cfg.indices, Seed: cfg.seed, Model: cfg.model}
		res, err := simrun.Run(machine, c, cfg.check)
		if err != nil {
			return nil, fmt.Errorf("%s %v on %d ranks at n=%d: %w", cfg.op, a, p, n, err)
		}
		row := simRow(cfg, c, machine.Ranks, res)
		if a != collectives.AlgoAuto && (best < 0 || row.SimTimeUS < rows[best].SimTimeUS) {
			best = len(rows)
		}
		rows = append(rows, row)
		runtime.GC() // the next case starts from the memory this one freed
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
	if c.Op == "sparse-allreduce" {
		r.Density = c.Density
	}
	r.Model = &modelFigures{AlphaUS: cfg.model.Alpha * 1e6, BetaGBps: 1 / cfg.model.Beta / 1e9,
		GammaGBps: 1 / cfg.model.Gamma / 1e9, SparseGammaGBps: 1 / cfg.model.SparseGammaOrDefault() / 1e9}
	return simResult{result: r, SimTimeUS: us, BusiestLink: res.Busiest.Name, BusiestLinkBytes: res.Busiest.Bytes,
		Topology: cfg.machine.Topology.String(), Compute: cfg.machine.Compute.Mode.String(),
		Cores: cfg.machine.Cores, RateGbit: cfg.machine.Rate * 8 / 1e9, LatencyUS: cfg.machine.Latency * 1e6}
}
