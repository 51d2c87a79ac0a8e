package data

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLIBSVM: any input either fails with a FileError naming a line, or
// parses into valid rows; when the whole file parses, every shard does
// and together they hold each sample once.
func FuzzLIBSVM(f *testing.F) {
	for _, s := range []string{"1 1:1 3:0.5\n-1 2:1\n", "# c\n\n0 4:1e-3 # x\r\n", "1 3:1 2:1", "2 qid:3 1:.5", "+1 1:1 2:2 3:3\n-1\n"} {
		f.Add([]byte(s), uint8(3), false)
	}
	f.Fuzz(func(t *testing.T, text []byte, p uint8, gz bool) {
		size := int(p%8) + 1
		read := func(rank, size int) (*Set, error) {
			o := Options{Rank: rank, Size: size}
			if gz {
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				zw.Write(text)
				zw.Close()
				zr, err := gzip.NewReader(&b)
				if err != nil {
					t.Fatal(err)
				}
				s, _, err := ReadLIBSVMStream("fuzz", zr, o)
				return s, err
			}
			s, _, err := ReadLIBSVM("fuzz", bytes.NewReader(text), int64(len(text)), nil, o)
			return s, err
		}
		whole, err := read(0, 1)
		if err != nil {
			if _, ok := err.(*FileError); !ok {
				t.Fatalf("error %v is not a FileError", err)
			}
			return
		}
		checkRows(t, whole)
		n := 0
		for r := 0; r < size; r++ {
			s, err := read(r, size)
			if err != nil {
				t.Fatalf("the whole input parses but shard %d of %d fails: %v", r, size, err)
			}
			checkRows(t, s)
			n += s.Len()
		}
		if n != whole.Len() {
			t.Fatalf("%d shards hold %d samples, the whole input %d", size, n, whole.Len())
		}
	})
}

func checkRows(t *testing.T, s *Set) {
	if len(s.RowPtr) != s.Len()+1 || len(s.Idx) != len(s.Val) || s.RowPtr[s.Len()] != len(s.Idx) {
		t.Fatalf("inconsistent rows: %d samples, %d row pointers, %d/%d entries", s.Len(), len(s.RowPtr), len(s.Idx), len(s.Val))
	}
	for r := 0; r < s.Len(); r++ {
		idx, _ := s.Row(r)
		for j, f := range idx {
			if int(f) >= s.Dim || j > 0 && f <= idx[j-1] {
				t.Fatalf("sample %d: indices %v, dimension %d", r, idx, s.Dim)
			}
		}
	}
}

// FuzzIDX: any pair of files either fails with an error or yields images
// of the announced size with labels below the class count.
func FuzzIDX(f *testing.F) {
	f.Add(idxBytes([]int{2, 2, 2}, []byte{1, 2, 3, 4, 5, 6, 7, 8}), idxBytes([]int{2}, []byte{0, 9}), uint8(2))
	f.Add(idxBytes([]int{3, 1}, []byte{1, 2}), idxBytes([]int{3}, []byte{0, 1, 2}), uint8(1))
	f.Add([]byte{0, 0, 8, 3, 255, 255, 255, 255}, []byte{0, 0, 8, 1, 0, 0, 0, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, images, labels []byte, p uint8) {
		dir := t.TempDir()
		ip, lp := filepath.Join(dir, "i"), filepath.Join(dir, "l")
		os.WriteFile(ip, images, 0o644)
		os.WriteFile(lp, labels, 0o644)
		size := int(p%4) + 1
		for r := 0; r < size; r++ {
			s, err := LoadIDX(ip, lp, 10, Options{Rank: r, Size: size})
			if err != nil {
				return
			}
			if len(s.X) != s.Len()*s.Dim {
				t.Fatalf("%d values for %d images of %d", len(s.X), s.Len(), s.Dim)
			}
			for _, l := range s.Labels {
				if l < 0 || l >= 10 {
					t.Fatalf("label %d", l)
				}
			}
		}
	})
}
