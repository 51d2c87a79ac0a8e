package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

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

// csvHeader: the first sixteen columns keep their positions (scripts read
// them by number); later columns are appended.
var csvHeader = []string{"op", "algo", "algo_chosen", "transport", "np", "n", "dtype", "bytes",
	"time_us_min", "time_us_median", "time_us_max", "algbw_gbps", "busbw_gbps", "bytes_sent_per_rank", "check", "max_rss_bytes",
	"redop", "root", "time_us_avg", "wrong"}

// row records res and prints it. A row that cannot be encoded (a
// non-finite figure in JSON) is an error, not a line left out: readers
// of the output count its rows.
func (r *reporter) row(res result) error {
	r.rows = append(r.rows, res)
	if !r.active {
		return nil
	}
	switch r.format {
	case "json":
		b, err := json.Marshal(res.rounded())
		if err != nil {
			return fmt.Errorf("bench: the %s row of %s at n=%d: %w", res.Algo, res.Op, res.N, err)
		}
		fmt.Fprintln(r.w, string(b))
	case "csv":
		r.csvRow(res)
	default:
		switch {
		case res.Inflight > 0:
			r.overlapRow(res)
		case res.Op == "compress":
			r.compressRow(res)
		case res.Op == "sparse-allreduce" || res.Op == "sparse-allgather" || r.sparse:
			r.sparseRow(res)
		default:
			r.denseRow(res)
		}
	}
	return nil
}

func (r *reporter) csvRow(res result) {
	if r.cw == nil {
		r.cw = csv.NewWriter(r.w)
		r.cw.Write(csvHeader)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	r.cw.Write([]string{res.Op, res.Algo, res.AlgoChosen, res.Transport, strconv.Itoa(res.NP), strconv.Itoa(res.N),
		res.DType, strconv.FormatInt(res.Bytes, 10), f(res.TimeMin), f(res.TimeMedian), f(res.TimeMax),
		f(res.AlgBW), f(res.BusBW), strconv.FormatInt(res.BytesSent, 10), res.Check, strconv.FormatInt(res.MaxRSS, 10),
		res.Redop, strconv.Itoa(res.Root), f(res.TimeAvg), wrongText(res.Wrong, "")})
	r.cw.Flush()
}

// wrongText prints a wrong-element count, or unchecked for nil (the
// results were not checked).
func wrongText(w *int64, unchecked string) string {
	if w == nil {
		return unchecked
	}
	return strconv.FormatInt(*w, 10)
}

func (r *reporter) denseRow(res result) {
	if !r.header {
		r.header = true
		fmt.Fprintf(r.w, "# sparcml bench: op=%s np=%d dtype=%s transport=%s; times in us per iteration (the slowest rank's), bandwidths in GB/s\n",
			res.Op, res.NP, res.DType, res.Transport)
		fmt.Fprintf(r.w, "%12s %12s %5s %4s %18s %9s %10s %10s %10s %10s %10s %10s %12s %7s %7s\n", "n", "bytes", "redop", "root",
			"algo", "transport", "min_us", "avg_us", "median_us", "max_us", "algbw", "busbw", "sent/rank", "check", "#wrong")
	}
	fmt.Fprintf(r.w, "%12d %12d %5s %4d %18s %9s %10.1f %10.1f %10.1f %10.1f %10.3f %10.3f %12d %7s %7s\n",
		res.N, res.Bytes, res.Redop, res.Root, res.AlgoChosen, res.Transport, res.TimeMin, res.TimeAvg, res.TimeMedian, res.TimeMax,
		res.AlgBW, res.BusBW, res.BytesSent, res.Check, wrongText(res.Wrong, "N/A"))
}

// sparseRow prints sparse rows and the dense rows of --vs-dense among them.
func (r *reporter) sparseRow(res result) {
	if !r.sparse {
		r.sparse = true
		fmt.Fprintf(r.w, "# sparcml bench: op=%s np=%d dtype=%s transport=%s; times in us per iteration (the slowest rank's)\n",
			res.Op, res.NP, res.DType, res.Transport)
		fmt.Fprintf(r.w, "%10s %8s %11s %5s %18s %10s %10s %10s %10s %12s %12s %9s %7s %7s\n", "n", "density", "nnz_in", "redop", "algo",
			"min_us", "avg_us", "median_us", "max_us", "sent/rank", "predicted", "vs_dense", "check", "#wrong")
	}
	speed := ""
	if res.SpeedupVsDense > 0 {
		speed = fmt.Sprintf("%.2fx", res.SpeedupVsDense)
	}
	name := res.AlgoChosen
	switch {
	case !strings.HasPrefix(res.Op, "sparse-"):
		name = "dense:" + name
	case res.Algo == "auto" || res.Algo == autoTensor:
		name = res.Algo + ":" + name // the model's choice
	}
	fmt.Fprintf(r.w, "%10d %8.4f %11d %5s %18s %10.1f %10.1f %10.1f %10.1f %12d %12d %9s %7s %7s\n", res.N, res.Density, res.NNZIn,
		res.Redop, name, res.TimeMin, res.TimeAvg, res.TimeMedian, res.TimeMax, res.BytesSent, res.PredictedBytes, speed,
		res.Check, wrongText(res.Wrong, "N/A"))
}

// compressRow prints --op compress rows: per scope the median time, the
// entries kept against K, and the bytes a rank sent against Ok-Topk's
// bound.
func (r *reporter) compressRow(res result) {
	if !r.header {
		r.header = true
		fmt.Fprintf(r.w, "# sparcml bench: op=compress np=%d dtype=%s transport=%s select=%s; times in us per iteration (the slowest rank's)\n",
			res.NP, res.DType, res.Transport, res.Select)
		fmt.Fprintf(r.w, "%10s %8s %7s %18s %8s %10s %10s %10s %12s %12s %7s %7s\n", "n", "density", "scope", "algo", "K",
			"kept", "median_us", "max_us", "sent/rank", "6k(P-1)/P", "check", "#wrong")
	}
	fmt.Fprintf(r.w, "%10d %8.4f %7s %18s %8d %10.1f %10.1f %10.1f %12d %12d %7s %7s\n", res.N, res.Density, res.Scope, res.AlgoChosen,
		res.K, res.Kept, res.TimeMedian, res.TimeMax, res.BytesSent, res.BoundBytes, res.Check, wrongText(res.Wrong, "N/A"))
}

func (r *reporter) overlapRow(res result) {
	if !r.header {
		r.header = true
		fmt.Fprintf(r.w, "# sparcml bench overlap: op=%s np=%d dtype=%s transport=%s inflight=%d; medians in us, max over ranks\n",
			res.Op, res.NP, res.DType, res.Transport, res.Inflight)
		fmt.Fprintf(r.w, "%12s %5s %18s %12s %12s %12s %14s %11s %7s %7s\n", "n", "redop", "algo", "comm_us", "compute_us", "both_us",
			"comm+compute", "both/(sum)", "check", "#wrong")
	}
	fmt.Fprintf(r.w, "%12d %5s %18s %12.1f %12.1f %12.1f %14.1f %11.3f %7s %7s\n",
		res.N, res.Redop, res.AlgoChosen, res.CommUS, res.ComputeUS, res.OverlapUS, res.CommUS+res.ComputeUS, res.OverlapRatio,
		res.Check, wrongText(res.Wrong, "N/A"))
}

func (r *reporter) close() {
	if r.cw != nil {
		r.cw.Flush()
	}
}

// rounded returns res with its measured figures rounded for JSON: times
// to 0.01 us (10 ns, below what one iteration's timing resolves),
// bandwidths and ratios to four significant digits (so that the small
// bandwidths of small messages keep their precision).
func (res result) rounded() result {
	for _, t := range []*float64{&res.TimeMin, &res.TimeMedian, &res.TimeMax, &res.TimeAvg,
		&res.ComputeUS, &res.CommUS, &res.OverlapUS} {
		*t = math.Round(*t*100) / 100
	}
	for _, x := range []*float64{&res.AlgBW, &res.BusBW, &res.SpeedupVsDense, &res.OverlapRatio, &res.PredictedUS} {
		*x = significant(*x, 4)
	}
	return res
}

// significant rounds x to digits significant decimal digits.
func significant(x float64, digits int) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	scale := math.Pow(10, float64(digits-1)-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*scale) / scale
}
