package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/sparcml/sparcml/train/plot"
)

// writePlot draws simulated time against ranks to path: a PNG when its
// name ends in .png, else an SVG document.
func writePlot(path string, rows []simResult) error {
	if !strings.HasSuffix(strings.ToLower(path), ".png") {
		return os.WriteFile(path, plotSVG(rows), 0o644)
	}
	p := plot.Panel{Title: "simulated time per call (us)", XLabel: "ranks (P)", LogX: true, LogY: true}
	keys, series := plotSeries(rows)
	for _, k := range keys {
		s := plot.Series{Name: k.label()}
		for _, r := range series[k] {
			s.X, s.Y = append(s.X, float64(r.NP)), append(s.Y, r.SimTimeUS)
		}
		p.Series = append(p.Series, s)
	}
	first := rows[0]
	title := fmt.Sprintf("sparcml sim --op %s: %s %g Gbit/s, %g us latency, compute %s", first.Op, first.Topology, first.RateGbit,
		first.LatencyUS, first.Compute)
	return plot.WriteOne(path, title, p)
}

// plotKey is one line of a plot: an algorithm (or scope) at a size and
// density.
type plotKey struct {
	algo string
	n    int
	d    float64
}

func (k plotKey) label() string {
	label := k.algo
	if k.d > 0 {
		label += fmt.Sprintf(" %g%%", k.d*100)
	}
	return label + fmt.Sprintf(" n=%d", k.n)
}

// plotSeries groups rows into lines, in order of first appearance, each
// sorted by ranks.
func plotSeries(rows []simResult) ([]plotKey, map[plotKey][]simResult) {
	series := map[plotKey][]simResult{}
	var keys []plotKey
	for _, r := range rows {
		k := plotKey{r.Algo, r.N, r.Density}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], r)
	}
	for _, k := range keys {
		slices.SortFunc(series[k], func(a, b simResult) int { return a.NP - b.NP })
	}
	return keys, series
}

// plotSVG draws simulated time against ranks, log-log, one line per
// (algorithm, size, density), as an SVG document.
func plotSVG(rows []simResult) []byte {
	keys, series := plotSeries(rows)
	minP, maxP, minT, maxT := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		if r.SimTimeUS <= 0 {
			continue
		}
		minP, maxP = min(minP, float64(r.NP)), max(maxP, float64(r.NP))
		minT, maxT = min(minT, r.SimTimeUS), max(maxT, r.SimTimeUS)
	}
	if maxP <= minP {
		maxP = minP * 2
	}
	if maxT <= minT {
		maxT = minT * 2
	}
	const w, h, left, bottom, top, right = 760, 480, 80, 50, 20, 220
	x := func(p float64) float64 {
		return left + (math.Log2(p)-math.Log2(minP))/(math.Log2(maxP)-math.Log2(minP))*(w-left-right)
	}
	lo, hi := math.Floor(math.Log10(minT)), math.Ceil(math.Log10(maxT))
	y := func(t float64) float64 { return h - bottom - (math.Log10(t)-lo)/(hi-lo)*(h-bottom-top) }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ranks (P)</text>`+"\n", (w-right+left)/2, h-10)
	fmt.Fprintf(&b, `<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">simulated time (us)</text>`+"\n", h/2, h/2)
	for p := minP; p <= maxP; p *= 2 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n",
			x(p), top, x(p), h-bottom, x(p), h-bottom+16, p)
	}
	for e := lo; e <= hi; e++ {
		t := math.Pow(10, e)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, y(t), w-right, y(t), left-6, y(t)+4, t)
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	for i, k := range keys {
		pts := series[k]
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, c)
		for _, r := range pts {
			if r.SimTimeUS > 0 {
				fmt.Fprintf(&b, "%.1f,%.1f ", x(float64(r.NP)), y(r.SimTimeUS))
			}
		}
		b.WriteString(`"/>` + "\n")
		label := k.label()
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+10, top+10+16*i, w-right+30, top+10+16*i, c, w-right+35, top+14+16*i, label)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
