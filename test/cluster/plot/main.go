// Command plot turns the JSON lines of `make bench-cluster` into a
// Markdown table (for docs/PERFORMANCE.md) and a PNG plot of time against
// density for each system, one panel per link rate and host count.
//
//	go run . -in ../../../bench/results/cluster.jsonl -md cluster.md -png cluster.png
//
// It is a module of its own so that the plotting library stays out of the
// runtime's go.mod.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sparcml/sparcml/test/cluster/benchio"
)

// row is what this tool reads of one result line.
type row struct {
	System     string  `json:"system"` // sparcml or openmpi
	Op         string  `json:"op"`
	Algo       string  `json:"algo"`
	AlgoChosen string  `json:"algo_chosen"`
	Hosts      int     `json:"hosts"`
	Rate       string  `json:"rate"`
	RateMbps   float64 `json:"rate_mbps"`
	ProbeMbps  float64 `json:"probe_mbps"`
	ProbeOK    bool    `json:"probe_ok"`
	RingMin    float64 `json:"ring_probe_mbps_min"`
	N          int     `json:"n"`
	Density    float64 `json:"density"`
	Dist       string  `json:"dist"`
	Quant      string  `json:"quant"`
	TimeUS     float64 `json:"time_us_median"`
	BusBW      float64 `json:"busbw_gbps"`
	SentBytes  float64 `json:"bytes_sent_per_rank"`
	Load       string  `json:"load"`
	Round      int     `json:"round"`
	CPUs       int     `json:"cpus"`
	// IndicesForced is set on the runs of benchcluster -indices raw or
	// packed, which compare index wires and stay out of the tables.
	IndicesForced string `json:"indices_forced"`
	rounds        int    // rows merged into this one
}

// setting is one cluster: a rate and a host count.
type setting struct {
	rate  string
	hosts int
}

func main() {
	in := flag.String("in", "bench/results/cluster.jsonl", "JSON lines of make bench-cluster")
	md := flag.String("md", "", "write the Markdown tables here (default stdout)")
	png := flag.String("png", "", "write the plot here")
	flag.Parse()
	rows, err := read(*in)
	if err != nil {
		fail(err)
	}
	rows = mergeRounds(rows)
	settings := settingsOf(rows)
	var b strings.Builder
	writeTables(&b, rows, settings)
	if *md == "" {
		fmt.Print(b.String())
	} else if err := os.WriteFile(*md, []byte(b.String()), 0o644); err != nil {
		fail(err)
	}
	if *png != "" {
		if err := writePlot(*png, rows, settings); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "plot:", err)
	os.Exit(1)
}

func read(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if r.Quant == "" {
			r.Quant = "none"
		}
		if r.IndicesForced != "" {
			continue
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}

// mergeRounds collapses the rows of one case measured in several rounds
// into one holding the medians of its time and bus bandwidth.
func mergeRounds(rows []row) []row {
	type key struct {
		system, op, algo, rate, dist, quant string
		hosts                               int
		density                             float64
	}
	idx := map[key]int{}
	var out []row
	var times, bws [][]float64
	for _, r := range rows {
		k := key{r.System, r.Op, r.Algo, r.Rate, r.Dist, r.Quant, r.Hosts, r.Density}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, r)
			times, bws = append(times, nil), append(bws, nil)
		}
		times[i] = append(times[i], r.TimeUS)
		bws[i] = append(bws[i], r.BusBW)
	}
	for i := range out {
		out[i].TimeUS, out[i].BusBW, out[i].rounds = benchio.Median(times[i]), benchio.Median(bws[i]), len(times[i])
	}
	return out
}

// loadRange is the range of the load averages recorded with rs.
func loadRange(rs []row) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		var l float64
		if _, err := fmt.Sscan(r.Load, &l); err == nil {
			lo, hi = math.Min(lo, l), math.Max(hi, l)
		}
	}
	if math.IsInf(lo, 1) {
		return "unknown"
	}
	return fmt.Sprintf("%.1f to %.1f", lo, hi)
}

func settingsOf(rows []row) []setting {
	seen := map[setting]bool{}
	var out []setting
	for _, r := range rows {
		s := setting{r.Rate, r.Hosts}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func (s setting) of(rows []row) []row {
	var out []row
	for _, r := range rows {
		if r.Rate == s.rate && r.Hosts == s.hosts {
			out = append(out, r)
		}
	}
	return out
}

// find returns the first row matching.
func find(rows []row, ok func(row) bool) (row, bool) {
	for _, r := range rows {
		if ok(r) {
			return r, true
		}
	}
	return row{}, false
}

func mpiDense(rows []row) (row, bool) {
	return find(rows, func(r row) bool { return r.System == "openmpi" && r.Op == "allreduce" })
}

func ourDense(rows []row, algo string) (row, bool) {
	return find(rows, func(r row) bool { return r.System == "sparcml" && r.Op == "allreduce" && r.Algo == algo })
}

func sparseRow(rows []row, system, algo, dist, quant string, d float64) (row, bool) {
	return find(rows, func(r row) bool {
		return r.System == system && r.Op == "sparse-allreduce" && r.Algo == algo && r.Dist == dist &&
			r.Quant == quant && math.Abs(r.Density-d) < 1e-12
	})
}

func writeTables(b *strings.Builder, rows []row, settings []setting) {
	for _, s := range settings {
		rs := s.of(rows)
		if len(rs) == 0 {
			continue
		}
		h := rs[0]
		trusted := "within 5% of the rate"
		if !h.ProbeOK {
			trusted = "NOT within 5% of the rate: the CPUs, not the links, limit these figures"
		}
		fmt.Fprintf(b, "### %d hosts at %s, n = %d float32\n\n", s.hosts, s.rate, h.N)
		if h.rounds > 1 {
			fmt.Fprintf(b, "Each figure is the median of %d rounds of the whole list of cases, the systems alternating within each round.\n\n", h.rounds)
		}
		fmt.Fprintf(b, "Links: a stream from host 0 to host 1 made %.0f Mbit/s (%s); every host streaming to the next at once, %.0f Mbit/s at the slowest. "+
			"Load average during the cases: %s on %d cores.\n\n", h.ProbeMbps, trusted, h.RingMin, loadRange(rs), h.CPUs)
		denseTable(b, rs)
		sparseTable(b, rs)
	}
	targets(b, rows)
}

func denseTable(b *strings.Builder, rs []row) {
	mpi, haveMPI := mpiDense(rs)
	linkGBps := rs[0].RateMbps / 8 / 1000
	fmt.Fprintf(b, "| dense allreduce | time (ms) | busbw (GB/s) | busbw / link rate | vs MPI_Allreduce |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Op != "allreduce" {
			continue
		}
		name := r.Algo
		if r.System == "openmpi" {
			name = "Open MPI MPI_Allreduce"
		} else if r.Algo == "auto" {
			name = "auto (" + r.AlgoChosen + ")"
		}
		vs := "-"
		if haveMPI && r.System == "sparcml" {
			vs = fmt.Sprintf("%.2fx", mpi.TimeUS/r.TimeUS)
		}
		fmt.Fprintf(b, "| %s | %.1f | %.3f | %.2f | %s |\n", name, r.TimeUS/1e3, r.BusBW, r.BusBW/linkGBps, vs)
	}
	b.WriteString("\n")
}

// densities present among the sparse rows, ascending.
func densities(rs []row) []float64 {
	seen := map[float64]bool{}
	var out []float64
	for _, r := range rs {
		if r.Op == "sparse-allreduce" && !seen[r.Density] {
			seen[r.Density] = true
			out = append(out, r.Density)
		}
	}
	sort.Float64s(out)
	return out
}

func sparseTable(b *strings.Builder, rs []row) {
	mpi, haveMPI := mpiDense(rs)
	fmt.Fprintf(b, "| sparse allreduce | density | auto (chosen) ms | best forced ms | auto / best | auto-tensor ms | auto-tensor / best | MPI_Allgatherv ms | auto vs Allgatherv | auto vs MPI_Allreduce |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, dist := range []string{"uniform", "powerlaw"} {
		for _, quant := range []string{"none", "q4"} {
			for _, d := range densities(rs) {
				auto, ok := sparseRow(rs, "sparcml", "auto", dist, quant, d)
				if !ok {
					continue
				}
				best := row{TimeUS: math.Inf(1)}
				for _, r := range rs {
					if r.System == "sparcml" && r.Op == "sparse-allreduce" && !isAuto(r.Algo) && r.Dist == dist &&
						r.Quant == quant && math.Abs(r.Density-d) < 1e-12 && r.TimeUS < best.TimeUS {
						best = r
					}
				}
				bestCol, ratio, tensorCol, tensorRatio := "-", "-", "-", "-"
				tensor, haveTensor := sparseRow(rs, "sparcml", "auto-tensor", dist, quant, d)
				if haveTensor {
					tensorCol = fmt.Sprintf("%.1f (%s)", tensor.TimeUS/1e3, tensor.AlgoChosen)
				}
				if !math.IsInf(best.TimeUS, 1) {
					bestCol = fmt.Sprintf("%.1f (%s)", best.TimeUS/1e3, best.Algo)
					ratio = fmt.Sprintf("%.2f", auto.TimeUS/best.TimeUS)
					if haveTensor {
						tensorRatio = fmt.Sprintf("%.2f", tensor.TimeUS/best.TimeUS)
					}
				}
				agv, vsAgv := "-", "-"
				if ag, ok := sparseRow(rs, "openmpi", "MPI_Allgatherv", dist, "none", d); ok {
					agv = fmt.Sprintf("%.1f", ag.TimeUS/1e3)
					vsAgv = fmt.Sprintf("%.1fx", ag.TimeUS/auto.TimeUS)
				}
				vsMPI := "-"
				if haveMPI {
					vsMPI = fmt.Sprintf("%.1fx", mpi.TimeUS/auto.TimeUS)
				}
				name := dist
				if quant != "none" {
					name += ", " + quant
				}
				fmt.Fprintf(b, "| %s | %g%% | %.1f (%s) | %s | %s | %s | %s | %s | %s | %s |\n",
					name, d*100, auto.TimeUS/1e3, auto.AlgoChosen, bestCol, ratio, tensorCol, tensorRatio, agv, vsAgv, vsMPI)
			}
		}
	}
	b.WriteString("\n")
}

// isAuto says whether a sparse row is the model's choice (auto, or auto
// on a named tensor, which reuses the choice) rather than a forced
// algorithm.
func isAuto(algo string) bool { return algo == "auto" || algo == "auto-tensor" }

// targets checks the speed targets of the emulated-cluster issue on the
// 8-host 1 Gbit/s setting.
func targets(b *strings.Builder, rows []row) {
	rs := setting{"1gbit", 8}.of(rows)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(b, "### Targets (8 hosts at 1 Gbit/s)\n\n| target | measured | met |\n|---|---:|---|\n")
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	mpi, haveMPI := mpiDense(rs)
	if dense, ok := ourDense(rs, "auto"); ok {
		frac := dense.BusBW / (rs[0].RateMbps / 8 / 1000)
		fmt.Fprintf(b, "| dense auto busbw >= 0.9 of the link rate | %.2f | %s |\n", frac, mark(frac >= 0.9))
		if haveMPI {
			x := mpi.TimeUS / dense.TimeUS
			fmt.Fprintf(b, "| dense auto >= 1.5x MPI_Allreduce | %.2fx | %s |\n", x, mark(x >= 1.5))
		}
	}
	if auto, ok := sparseRow(rs, "sparcml", "auto", "uniform", "none", 0.01); ok {
		if haveMPI {
			x := mpi.TimeUS / auto.TimeUS
			fmt.Fprintf(b, "| sparse 1%% uniform auto >= 20x MPI_Allreduce | %.1fx | %s |\n", x, mark(x >= 20))
		}
		if ag, ok := sparseRow(rs, "openmpi", "MPI_Allgatherv", "uniform", "none", 0.01); ok {
			x := ag.TimeUS / auto.TimeUS
			fmt.Fprintf(b, "| sparse 1%% uniform auto >= 2x MPI_Allgatherv | %.1fx | %s |\n", x, mark(x >= 2))
		}
	}
	if q4, ok := sparseRow(rs, "sparcml", "auto", "uniform", "q4", 0.01); ok && haveMPI {
		x := mpi.TimeUS / q4.TimeUS
		fmt.Fprintf(b, "| sparse 1%% uniform q4 auto >= 50x MPI_Allreduce | %.1fx | %s |\n", x, mark(x >= 50))
	}
	b.WriteString("\n")
}

// series is one line of a panel.
type series struct {
	name   string
	color  color.Color
	dashed bool
	pts    plotter.XYs
}

func writePlot(path string, rows []row, settings []setting) error {
	const cols = 2
	nrows := (len(settings) + cols - 1) / cols
	plots := make([][]*plot.Plot, nrows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, s := range settings {
		p, err := panel(s, s.of(rows))
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = p
	}
	w, h := vg.Length(cols)*6*vg.Inch, vg.Length(nrows)*4.5*vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: nrows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

var (
	blue   = color.RGBA{31, 119, 180, 255}
	orange = color.RGBA{255, 127, 14, 255}
	green  = color.RGBA{44, 160, 44, 255}
	red    = color.RGBA{214, 39, 40, 255}
	purple = color.RGBA{148, 103, 189, 255}
)

func panel(s setting, rs []row) (*plot.Plot, error) {
	p := plot.New()
	title := fmt.Sprintf("%d hosts at %s", s.hosts, s.rate)
	if len(rs) > 0 && !rs[0].ProbeOK {
		title += fmt.Sprintf(" (CPU-bound: probe %.0f Mbit/s)", rs[0].ProbeMbps)
	}
	p.Title.Text = title
	p.X.Label.Text = "density (nonzeros per rank / n)"
	p.Y.Label.Text = "time per allreduce (ms)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	ds := densities(rs)
	if len(ds) == 0 {
		return p, nil
	}
	if len(ds) == 1 {
		// One density: give the log axis a range, which one point lacks.
		p.X.Min, p.X.Max = ds[0]/2, ds[0]*2
	}
	sparse := func(name, system, algo, dist, quant string, c color.Color, dashed bool) series {
		sr := series{name: name, color: c, dashed: dashed}
		for _, d := range ds {
			if r, ok := sparseRow(rs, system, algo, dist, quant, d); ok {
				sr.pts = append(sr.pts, plotter.XY{X: d, Y: r.TimeUS / 1e3})
			}
		}
		return sr
	}
	flat := func(name string, r row, ok bool, c color.Color) series {
		sr := series{name: name, color: c, dashed: true}
		if ok {
			sr.pts = plotter.XYs{{X: ds[0], Y: r.TimeUS / 1e3}, {X: ds[len(ds)-1], Y: r.TimeUS / 1e3}}
		}
		return sr
	}
	mpi, okM := mpiDense(rs)
	dense, okD := ourDense(rs, "auto")
	all := []series{
		sparse("sparcml sparse auto, uniform", "sparcml", "auto", "uniform", "none", blue, false),
		sparse("sparcml sparse auto, power law", "sparcml", "auto", "powerlaw", "none", green, false),
		sparse("sparcml sparse auto, uniform, q4", "sparcml", "auto", "uniform", "q4", purple, false),
		sparse("Open MPI Allgatherv, uniform", "openmpi", "MPI_Allgatherv", "uniform", "none", orange, false),
		sparse("Open MPI Allgatherv, power law", "openmpi", "MPI_Allgatherv", "powerlaw", "none", red, false),
		flat("sparcml dense allreduce (auto)", dense, okD, blue),
		flat("Open MPI MPI_Allreduce (dense)", mpi, okM, orange),
	}
	maxY := 0.0
	for _, sr := range all {
		if len(sr.pts) == 0 {
			continue
		}
		for _, pt := range sr.pts {
			maxY = math.Max(maxY, pt.Y)
		}
		l, pts, err := plotter.NewLinePoints(sr.pts)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = sr.color, sr.color
		l.Width = vg.Points(1.5)
		if sr.dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			pts.Radius = 0
		}
		p.Add(l, pts)
		p.Legend.Add(sr.name, l)
	}
	p.Add(plotter.NewGrid())
	// Headroom above the data for the legend (a decade and a half on the log
	// scale).
	p.Y.Max = maxY * 30
	return p, nil
}
