package data

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes encodes an IDX file of unsigned bytes.
func idxBytes(dims []int, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, data...)
}

func writeIDX(t *testing.T, dir string, n, rows, cols int, gz bool, rng *rand.Rand) (images, labels string, pix, lab []byte) {
	pix = make([]byte, n*rows*cols)
	for i := range pix {
		pix[i] = byte(rng.IntN(256))
	}
	lab = make([]byte, n)
	for i := range lab {
		lab[i] = byte(rng.IntN(10))
	}
	images, labels = filepath.Join(dir, "img"), filepath.Join(dir, "lab")
	ib, lb := idxBytes([]int{n, rows, cols}, pix), idxBytes([]int{n}, lab)
	if gz {
		ib, lb = gzipped(t, string(ib)), gzipped(t, string(lb))
	}
	os.WriteFile(images, ib, 0o644)
	os.WriteFile(labels, lb, 0o644)
	return images, labels, pix, lab
}

// Every image is in exactly one rank's shard, scaled to [0, 1], with its
// label, plain and gzip, with and without a limit.
func TestIDXShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, gz := range []bool{false, true} {
		dir := t.TempDir()
		images, labels, pix, lab := writeIDX(t, dir, 37, 3, 4, gz, rng)
		for _, limit := range []int{0, 20} {
			n := 37
			if limit > 0 {
				n = limit
			}
			for _, p := range []int{1, 2, 4, 7} {
				next := 0
				for r := 0; r < p; r++ {
					s, err := LoadIDX(images, labels, 10, Options{Rank: r, Size: p, Limit: limit})
					if err != nil {
						t.Fatal(err)
					}
					if s.Dim != 12 {
						t.Fatalf("dim %d", s.Dim)
					}
					for i := 0; i < s.Len(); i++ {
						_, x := s.Row(i)
						for j, v := range x {
							if v != float32(pix[next*12+j])/255 {
								t.Fatalf("gzip %v P=%d rank %d sample %d pixel %d: %v", gz, p, r, i, j, v)
							}
						}
						if s.Labels[i] != int32(lab[next]) || s.Where(i) != fmt.Sprintf("%s record %d", images, next+1) {
							t.Fatalf("sample %d: label %d at %s", next, s.Labels[i], s.Where(i))
						}
						next++
					}
				}
				if next != n {
					t.Fatalf("gzip %v P=%d: %d of %d images", gz, p, next, n)
				}
			}
		}
	}
}

func TestIDXErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	img := write("img", idxBytes([]int{4, 2, 2}, make([]byte, 16)))
	lab := write("lab", idxBytes([]int{4}, []byte{1, 2, 3, 4}))
	for name, c := range map[string]struct {
		images, labels string
		rank, size     int
		want           string
	}{
		"missing":      {filepath.Join(dir, "nope"), lab, 0, 1, "nope: open"},
		"magic":        {write("m", []byte("hello world, not idx")), lab, 0, 1, "not an IDX file"},
		"type":         {write("t", []byte{0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}), lab, 0, 1, "value type 0x0d"},
		"short header": {write("h", []byte{0, 0, 8, 3, 0, 0}), lab, 0, 1, "header truncated"},
		"truncated":    {write("tr", idxBytes([]int{4, 2, 2}, make([]byte, 10))), lab, 0, 1, "truncated"},
		"truncated gz": {write("trz", gzipped(t, string(idxBytes([]int{4, 2, 2}, make([]byte, 10))))), lab, 1, 2, "record 3"},
		"count":        {img, write("c", idxBytes([]int{3}, []byte{1, 2, 3})), 0, 1, "3 labels for the 4 images"},
		"label":        {img, write("l", idxBytes([]int{4}, []byte{1, 2, 10, 4})), 1, 2, "record 3: bad data: label 10 out of range"},
		"not images":   {lab, lab, 0, 1, "not images"},
	} {
		_, err := LoadIDX(c.images, c.labels, 10, Options{Rank: c.rank, Size: c.size})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}

// The generator: reproducible, every sample in one shard whatever the
// number of ranks, about NNZ sorted features of unit norm, both classes.
func TestSynth(t *testing.T) {
	g := Synth{Name: "s", Dim: 100000, NNZ: 30, Samples: 500, Exponent: 1.1, Binary: false, Noise: 0.3, Seed: 5}
	one, oneTest, err := g.Generate(Options{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if one.Len() != 500 || oneTest.Len() != 50 {
		t.Fatalf("%d train, %d test samples", one.Len(), oneTest.Len())
	}
	var ones, nnz int
	for r := 0; r < one.Len(); r++ {
		idx, val := one.Row(r)
		var norm float64
		for j := range idx {
			if j > 0 && idx[j] <= idx[j-1] || int(idx[j]) >= g.Dim {
				t.Fatalf("sample %d: indices %v", r, idx)
			}
			norm += float64(val[j]) * float64(val[j])
		}
		if norm < 0.999 || norm > 1.001 {
			t.Fatalf("sample %d: norm %v", r, norm)
		}
		ones += int(one.Labels[r])
		nnz += len(idx)
	}
	if ones < 100 || ones > 400 || nnz < 500*25 {
		t.Fatalf("%d positive of 500, %d nonzeros", ones, nnz)
	}
	for _, p := range []int{2, 3} {
		var labels []int32
		var idx []uint32
		for r := 0; r < p; r++ {
			s, _, err := g.Generate(Options{Rank: r, Size: p})
			if err != nil {
				t.Fatal(err)
			}
			labels = append(labels, s.Labels...)
			idx = append(idx, s.Idx...)
		}
		if fmt.Sprint(labels) != fmt.Sprint(one.Labels) || fmt.Sprint(idx) != fmt.Sprint(one.Idx) {
			t.Fatalf("P=%d: the shards are not the one-rank set", p)
		}
	}
	if _, _, err := (Synth{Name: "bad", Dim: 10, NNZ: 20, Samples: 1, Exponent: 1}).Generate(Options{Size: 1}); err == nil {
		t.Fatal("more nonzeros than features accepted")
	}
}
