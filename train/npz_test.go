package train

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/train/model"
)

// A saved model reads back with the same arrays and shapes, and loads
// into a model of the same shape only.
func TestNPZRoundTrip(t *testing.T) {
	m, err := model.NewMLP([]int{5, 4, 3}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.npz")
	if err := SaveNPZ(path, m); err != nil {
		t.Fatal(err)
	}
	arrays, err := ReadNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range m.Tensors() {
		a := arrays[ts.Name]
		if len(a.Shape) != len(ts.Shape) || len(a.Data) != ts.Size() {
			t.Fatalf("%s: shape %v, %d values; want %v", ts.Name, a.Shape, len(a.Data), ts.Shape)
		}
		for i, v := range a.Data {
			if v != m.Params()[ts.Offset+i] {
				t.Fatalf("%s[%d] = %v, want %v", ts.Name, i, v, m.Params()[ts.Offset+i])
			}
		}
	}
	again, _ := model.NewMLP([]int{5, 4, 3}, 8, nil)
	if err := LoadNPZ(path, again); err != nil {
		t.Fatal(err)
	}
	for i := range again.Params() {
		if again.Params()[i] != m.Params()[i] {
			t.Fatal("loaded parameters differ")
		}
	}
	other, _ := model.NewMLP([]int{5, 6, 3}, 8, nil)
	if err := LoadNPZ(path, other); err == nil || !strings.Contains(err.Error(), "w0 has shape [5 4]") {
		t.Fatalf("a model of another shape: %v", err)
	}
	if err := os.WriteFile(path, []byte("PK not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadNPZ(path); err == nil {
		t.Fatal("a corrupt archive read")
	}
}

// FuzzReadNPY: any .npy bytes either fail with an error or give as many
// values as the shape says, without allocating for a shape the bytes do
// not hold.
func FuzzReadNPY(f *testing.F) {
	m, _ := model.NewMLP([]int{3, 2}, 1, nil)
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	if err := writeNPY(zw, "w0", []int{3, 2}, m.Params()[:6]); err != nil {
		f.Fatal(err)
	}
	zw.Close()
	zr, _ := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	rc, _ := zr.File[0].Open()
	var npy bytes.Buffer
	npy.ReadFrom(rc)
	f.Add(npy.Bytes())
	f.Add([]byte("\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := readNPY(bytes.NewReader(in), uint64(len(in)))
		if err != nil {
			return
		}
		n := 1
		for _, d := range a.Shape {
			n *= d
		}
		if len(a.Data) != n {
			t.Fatalf("shape %v, %d values", a.Shape, len(a.Data))
		}
	})
}
