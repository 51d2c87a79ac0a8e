package plot

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The PNG decodes, and each series' colour is drawn in every panel.
func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	a := Series{Name: "dense", X: []float64{0, 1, 2}, Y: []float64{10, 80, 85}}
	b := Series{Name: "topk:0.01", X: []float64{0, 1, 2}, Y: []float64{10, 70, 84}}
	panels := []Panel{{Title: "acc", XLabel: "epoch", Series: []Series{a, b}}, {Title: "flat", XLabel: "x", Series: []Series{{Name: "c", X: []float64{1}, Y: []float64{3}}}}}
	if err := Write(path, "title", panels); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Fatalf("size %v", b)
	}
	for i := range 2 {
		want := palette[i]
		n := 0
		for y := top; y < height; y++ {
			for x := 0; x < width/2; x++ {
				r, g, bb, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bb>>8) == want.B {
					n++
				}
			}
		}
		if n < 100 {
			t.Fatalf("series %d: %d pixels of its colour in the first panel", i, n)
		}
	}
}

// WriteOne draws log axes; points at or below zero are left out.
func TestWriteOneLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "one.png")
	s := Series{Name: "ring", X: []float64{8, 64, 1024}, Y: []float64{150, 0, 9000}}
	if err := WriteOne(path, "title", Panel{Title: "t", XLabel: "P", Series: []Series{s}, LogX: true, LogY: true}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != oneWidth || b.Dy() != oneHeight {
		t.Fatalf("size %v", b)
	}
}
