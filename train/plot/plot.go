// Package plot draws line charts to a PNG: the convergence of training
// runs (test accuracy and loss against epochs and against wall time, one
// line per run) and `sparcml sim`'s time against ranks on log axes. It uses the standard library's image and PNG encoder and the
// fixed 7x13 font of golang.org/x/image; a plotting library such as
// gonum's would bring fonts, PDF and LaTeX packages into the module of
// a communication library for four line charts.
package plot

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/sparcml/sparcml/train"
)

// Series is one line: its name and points.
type Series struct {
	Name string
	X, Y []float64
}

// Panel is one chart. LogX and LogY draw an axis in powers of two (x)
// or ten (y); points at or below zero are then left out.
type Panel struct {
	Title, XLabel string
	Series        []Series
	LogX, LogY    bool
}

// palette is distinguishable in colour and in grey.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {23, 190, 207, 255}, {140, 86, 75, 255}, {0, 0, 0, 255},
	{188, 189, 34, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {0, 0, 128, 255},
}

// Training draws results to a PNG at path: test accuracy and test loss
// against epochs (top) and against training wall time (bottom).
func Training(path, title string, results []*train.Result) error {
	var acc, loss, accT, lossT []Series
	for _, r := range results {
		var s Series
		s.Name = r.Variant.Name()
		a, l, at, lt := s, s, s, s
		for _, rec := range r.Records {
			a.X, a.Y = append(a.X, rec.Epoch), append(a.Y, 100*rec.TestAccuracy)
			l.X, l.Y = append(l.X, rec.Epoch), append(l.Y, rec.TestLoss)
			at.X, at.Y = append(at.X, rec.TimeS), append(at.Y, 100*rec.TestAccuracy)
			lt.X, lt.Y = append(lt.X, rec.TimeS), append(lt.Y, rec.TestLoss)
		}
		acc, loss, accT, lossT = append(acc, a), append(loss, l), append(accT, at), append(lossT, lt)
	}
	panels := []Panel{
		{Title: "test accuracy (%)", XLabel: "epoch", Series: acc},
		{Title: "test loss", XLabel: "epoch", Series: loss},
		{Title: "test accuracy (%)", XLabel: "training wall time (s)", Series: accT},
		{Title: "test loss", XLabel: "training wall time (s)", Series: lossT},
	}
	return Write(path, title, panels)
}

const (
	width, height = 1200, 900 // a 2x2 grid
	top           = 60        // title and one row of legend
	// One panel alone (WriteOne).
	oneWidth, oneHeight = 1000, 640
)

// Write draws panels in a 2x2 grid with a title and a legend.
func Write(path, title string, panels []Panel) error {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, 20, 22, title, color.Black)
	below := top
	if len(panels) > 0 {
		below = max(top, legend(img, panels[0].Series))
	}
	pw, ph := width/2, (height-below)/2
	for i, p := range panels {
		r := image.Rect((i%2)*pw, below+(i/2)*ph, (i%2+1)*pw, below+(i/2+1)*ph)
		drawPanel(img, r, p)
	}
	return save(path, img)
}

// WriteOne draws one panel with a title and a legend.
func WriteOne(path, title string, p Panel) error {
	img := image.NewRGBA(image.Rect(0, 0, oneWidth, oneHeight))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, 20, 22, title, color.Black)
	below := max(top, legend(img, p.Series))
	drawPanel(img, image.Rect(0, below, oneWidth, oneHeight), p)
	return save(path, img)
}

// legend draws the series' names and colours in rows under the title and
// returns the y below them.
func legend(img *image.RGBA, series []Series) int {
	x, y := 20, 38
	for i, s := range series {
		w := 40 + 7*len(s.Name)
		if x+w > img.Bounds().Dx()-10 && x > 20 {
			x, y = 20, y+18
		}
		c := palette[i%len(palette)]
		fill(img, image.Rect(x, y, x+24, y+4), c)
		text(img, x+30, y+7, s.Name, color.Black)
		x += w
	}
	return y + 22
}

func save(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// axis maps a panel's values to plotted ones (log2, log10 or as they are)
// and labels ticks with the values they stand for.
type axis struct {
	log  bool
	base float64
}

func (a axis) to(v float64) float64 {
	if !a.log {
		return v
	}
	if v <= 0 {
		return math.NaN()
	}
	return math.Log(v) / math.Log(a.base)
}

// ticks are round values over [lo, hi] (plotted units): every integer
// exponent on a log axis.
func (a axis) ticks(lo, hi float64) ([]float64, float64, float64) {
	if !a.log {
		return ticks(lo, hi)
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	var t []float64
	for e := lo; e <= hi; e++ {
		t = append(t, e)
		if a.base == 10 && hi-lo <= 2 && e < hi { // 2 and 5 between the powers of a short axis
			t = append(t, e+math.Log10(2), e+math.Log10(5))
		}
	}
	return t, lo, hi
}

func (a axis) label(t float64) string {
	if !a.log {
		return label(t)
	}
	return label(math.Pow(a.base, t))
}

func drawPanel(img *image.RGBA, r image.Rectangle, p Panel) {
	area := image.Rect(r.Min.X+70, r.Min.Y+25, r.Max.X-20, r.Max.Y-45)
	ax, ay := axis{p.LogX, 2}, axis{p.LogY, 10}
	series := make([]Series, len(p.Series))
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, s := range p.Series {
		for j := range s.X {
			x, y := ax.to(s.X[j]), ay.to(s.Y[j])
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
				continue
			}
			series[i].X, series[i].Y = append(series[i].X, x), append(series[i].Y, y)
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	text(img, area.Min.X, r.Min.Y+15, p.Title, color.Black)
	text(img, (area.Min.X+area.Max.X)/2-7*len(p.XLabel)/2, r.Max.Y-10, p.XLabel, color.Black)
	if xmin > xmax {
		return
	}
	xt, xmin, xmax := ax.ticks(xmin, xmax)
	yt, ymin, ymax := ay.ticks(ymin, ymax)
	px := func(x float64) int { return area.Min.X + int((x-xmin)/(xmax-xmin)*float64(area.Dx())) }
	py := func(y float64) int { return area.Max.Y - int((y-ymin)/(ymax-ymin)*float64(area.Dy())) }
	grid := color.RGBA{225, 225, 225, 255}
	for _, t := range xt {
		x := px(t)
		fill(img, image.Rect(x, area.Min.Y, x+1, area.Max.Y), grid)
		s := ax.label(t)
		text(img, x-7*len(s)/2, area.Max.Y+16, s, color.Black)
	}
	for _, t := range yt {
		y := py(t)
		fill(img, image.Rect(area.Min.X, y, area.Max.X, y+1), grid)
		s := ay.label(t)
		text(img, area.Min.X-8-7*len(s), y+4, s, color.Black)
	}
	box(img, area, color.Black)
	for i, s := range series {
		c := palette[i%len(palette)]
		for j := range s.X {
			x, y := px(s.X[j]), py(s.Y[j])
			fill(img, image.Rect(x-2, y-2, x+3, y+3), c)
			if j > 0 {
				line(img, px(s.X[j-1]), py(s.Y[j-1]), x, y, c)
			}
		}
	}
}

// ticks returns about five round tick values covering [lo, hi] and the
// axis range they span.
func ticks(lo, hi float64) ([]float64, float64, float64) {
	if hi <= lo {
		d := math.Max(math.Abs(lo)*0.05, 1e-3)
		lo, hi = lo-d, hi+d
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start, end := math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	var t []float64
	for v := start; v <= end+step/2; v += step {
		t = append(t, v)
	}
	return t, start, end
}

func label(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func box(img *image.RGBA, r image.Rectangle, c color.Color) {
	fill(img, image.Rect(r.Min.X, r.Min.Y, r.Max.X+1, r.Min.Y+1), c)
	fill(img, image.Rect(r.Min.X, r.Max.Y, r.Max.X+1, r.Max.Y+1), c)
	fill(img, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y+1), c)
	fill(img, image.Rect(r.Max.X, r.Min.Y, r.Max.X+1, r.Max.Y+1), c)
}

// line draws a two-pixel-wide segment (Bresenham, doubled).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		img.SetRGBA(x0+1, y0, c)
		img.SetRGBA(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
