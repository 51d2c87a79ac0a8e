package main

import (
	"bytes"
	"fmt"
	"math"
	"slices"
)

// plotSVG draws simulated time against ranks, log-log, one line per
// (algorithm, size, density), as an SVG document.
func plotSVG(rows []simResult) []byte {
	type key struct {
		algo string
		n    int
		d    float64
	}
	series := map[key][]simResult{}
	var keys []key
	for _, r := range rows {
		k := key{r.Algo, r.N, r.Density}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], r)
	}
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
		slices.SortFunc(pts, func(a, b simResult) int { return a.NP - b.NP })
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, c)
		for _, r := range pts {
			if r.SimTimeUS > 0 {
				fmt.Fprintf(&b, "%.1f,%.1f ", x(float64(r.NP)), y(r.SimTimeUS))
			}
		}
		b.WriteString(`"/>` + "\n")
		label := k.algo
		if k.d > 0 {
			label += fmt.Sprintf(" %g%%", k.d*100)
		}
		label += fmt.Sprintf(" n=%d", k.n)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+10, top+10+16*i, w-right+30, top+10+16*i, c, w-right+35, top+14+16*i, label)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
