package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// simReporter prints simResults as a table, JSON lines or CSV.
type simReporter struct {
	w      io.Writer
	format string
	header bool
	cw     *csv.Writer
}

func newSimReporter(w io.Writer, format string) *simReporter {
	return &simReporter{w: w, format: format}
}

var simCSVHeader = append(append([]string{}, csvHeader...), "density", "sim_time_us", "busiest_link", "busiest_link_bytes",
	"predicted_us", "predicted_bytes_per_rank", "best_forced_algo", "best_forced_us", "topology", "compute")

func (s *simReporter) row(r simResult) error {
	r.result = r.result.rounded()
	r.SimTimeUS = math.Round(r.SimTimeUS*100) / 100
	r.BestForcedUS = math.Round(r.BestForcedUS*100) / 100
	switch s.format {
	case "json":
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("sim: the %s row at n=%d: %w", r.Algo, r.N, err)
		}
		fmt.Fprintln(s.w, string(b))
	case "csv":
		if s.cw == nil {
			s.cw = csv.NewWriter(s.w)
			s.cw.Write(simCSVHeader)
		}
		f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
		s.cw.Write([]string{r.Op, r.Algo, r.AlgoChosen, r.Transport, strconv.Itoa(r.NP), strconv.Itoa(r.N), r.DType,
			strconv.FormatInt(r.Bytes, 10), f(r.TimeMin), f(r.TimeMedian), f(r.TimeMax), f(r.AlgBW), f(r.BusBW),
			strconv.FormatInt(r.BytesSent, 10), r.Check, "0", r.Redop, strconv.Itoa(r.Root), f(r.TimeAvg), wrongText(r.Wrong, ""),
			f(r.Density), f(r.SimTimeUS), r.BusiestLink, strconv.FormatInt(r.BusiestLinkBytes, 10), f(r.PredictedUS),
			strconv.FormatInt(r.PredictedBytes, 10), r.BestForcedAlgo, f(r.BestForcedUS), r.Topology, r.Compute})
	default:
		if !s.header {
			s.header = true
			cores := ""
			if r.Cores > 0 {
				cores = fmt.Sprintf(" cores=%d", r.Cores)
			}
			fmt.Fprintf(s.w, "# sparcml sim: op=%s dtype=%s topology=%s rate=%gGbit/s latency=%gus compute=%s%s; times in simulated us, bandwidths in GB/s\n",
				r.Op, r.DType, r.Topology, r.RateGbit, r.LatencyUS, r.Compute, cores)
			fmt.Fprintf(s.w, "%5s %10s %12s %8s %20s %12s %9s %9s %12s %12s %12s %12s %18s %11s %7s %7s\n", "np", "n", "bytes", "density",
				"algo", "sim_us", "algbw", "busbw", "sent/rank", "busiest_link", "predict_us", "predict_B", "best_forced", "best_us",
				"check", "#wrong")
		}
		name := r.AlgoChosen
		switch {
		case r.Scope == "global":
			name = "global"
		case r.Scope != "":
			name = "union:" + name
		case r.Algo == "auto":
			name = "auto:" + name
		}
		fmt.Fprintf(s.w, "%5d %10d %12d %8.4f %20s %12.1f %9.3f %9.3f %12d %12d %12.1f %12d %18s %11.1f %7s %7s\n", r.NP, r.N, r.Bytes,
			r.Density, name, r.SimTimeUS, r.AlgBW, r.BusBW, r.BytesSent, r.BusiestLinkBytes, r.PredictedUS, r.PredictedBytes,
			r.BestForcedAlgo, r.BestForcedUS, r.Check, wrongText(r.Wrong, "N/A"))
	}
	return nil
}

// rows prints rows and flushes them.
func (s *simReporter) rows(rows []simResult) error {
	for _, r := range rows {
		if err := s.row(r); err != nil {
			return err
		}
	}
	if s.cw != nil {
		s.cw.Flush()
	}
	return nil
}

func (s *simReporter) close() {
	if s.cw != nil {
		s.cw.Flush()
	}
}
