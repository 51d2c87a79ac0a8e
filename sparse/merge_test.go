package sparse

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMergeSmallKMatchesHeap: the linear-scan merge and the heap merge
// give the same entries with the same bits (values chosen so float sums
// depend on the order), for every part count the scan takes, with empty
// parts, identical supports and overlapping ones.
func TestMergeSmallKMatchesHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for k := 1; k <= smallK; k++ {
		for trial := range 20 {
			dim := 1 + rng.IntN(5000)
			if trial%3 == 0 {
				dim = 1 + rng.IntN(100000)
			}
			parts := make([]*Vector[float32], k)
			total := 0
			for i := range parts {
				nnz := rng.IntN(dim + 1)
				if trial%2 == 0 {
					nnz = rng.IntN(dim/50 + 1)
				}
				if trial%5 == 0 && i%2 == 1 {
					nnz = 0
				}
				v := randomVector[float32](rng, dim, nnz)
				for j := range v.Values {
					v.Values[j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6)))
				}
				parts[i] = v
				total += v.NNZ()
			}
			var a, b, w Vector[float32]
			mergeSmallK(&a, parts, dim, total)
			mergeK(&b, parts, dim, total)
			sumWindows(&w, parts, dim, total)
			sameBits(t, "scan", &a, &b)
			sameBits(t, "windows", &w, &b)
			// float32 sums of k terms err by at most k ulps of the
			// largest partial sum, bounded by the sum of magnitudes.
			ref, mag := make([]float64, dim), make([]float64, dim)
			for _, p := range parts {
				for j, x := range p.Indices {
					ref[x] += float64(p.Values[j])
					mag[x] += math.Abs(float64(p.Values[j]))
				}
			}
			got := a.ToDense(nil)
			for i := range ref {
				if d := math.Abs(float64(got[i]) - ref[i]); d > float64(k)*0x1p-23*mag[i] {
					t.Fatalf("k=%d position %d: %v, reference %v", k, i, got[i], ref[i])
				}
			}
		}
	}
}

func sameBits(t *testing.T, name string, a, b *Vector[float32]) {
	t.Helper()
	if len(a.Indices) != len(b.Indices) {
		t.Fatalf("%s: %d entries, heap merge %d", name, len(a.Indices), len(b.Indices))
	}
	for i := range a.Indices {
		if a.Indices[i] != b.Indices[i] || math.Float32bits(a.Values[i]) != math.Float32bits(b.Values[i]) {
			t.Fatalf("%s entry %d: (%d, %v), heap merge (%d, %v)", name, i, a.Indices[i], a.Values[i], b.Indices[i], b.Values[i])
		}
	}
}

// TestSumWindowsTopIndex: the largest index of a 2^32 dimension.
func TestSumWindowsTopIndex(t *testing.T) {
	parts := []*Vector[float32]{
		{Dim: MaxDim, Indices: []uint32{5, math.MaxUint32}, Values: []float32{1, 2}},
		{Dim: MaxDim, Indices: []uint32{math.MaxUint32}, Values: []float32{3}},
	}
	var w Vector[float32]
	sumWindows(&w, parts, MaxDim, 3)
	if len(w.Indices) != 2 || w.Indices[1] != math.MaxUint32 || w.Values[1] != 5 || w.Values[0] != 1 {
		t.Fatalf("got %v %v", w.Indices, w.Values)
	}
}

// BenchmarkSumAll4 is the split allreduce's owner step at P = 4: four
// slices of 1% each.
func BenchmarkSumAll4(b *testing.B) { benchSumAll(b, 4, 4) }

// TestAddAllToMatchesAddTo: the windowed scatter-add gives the bits of
// AddTo part after part, with sparse and dense parts mixed, and refuses
// out-of-range and unsorted indices instead of panicking.
func TestAddAllToMatchesAddTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 40 {
		dim := 1 + rng.IntN(30000)
		k := 1 + rng.IntN(9)
		parts := make([]*Vector[float32], k)
		for i := range parts {
			v := randomVector[float32](rng, dim, rng.IntN(dim/3+1))
			for j := range v.Values {
				v.Values[j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-4)))
			}
			if trial%4 == 0 && i == k/2 {
				v.Densify()
			}
			parts[i] = v
		}
		want := make([]float32, dim)
		got := make([]float32, dim)
		for i := range want {
			want[i] = float32(rng.IntN(5))
			got[i] = want[i]
		}
		for _, p := range parts {
			if err := p.AddTo(want); err != nil {
				t.Fatal(err)
			}
		}
		if err := AddAllTo(got, parts); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("trial %d position %d: %v, AddTo gives %v", trial, i, got[i], want[i])
			}
		}
	}
	bad := []*Vector[float32]{{Dim: 10, Indices: []uint32{3, 12}, Values: []float32{1, 1}}}
	if err := AddAllTo(make([]float32, 10), bad); err == nil {
		t.Fatal("out-of-range index accepted")
	}
	bad = []*Vector[float32]{{Dim: 10000, Indices: []uint32{5000, 3}, Values: []float32{1, 1}}}
	if err := AddAllTo(make([]float32, 10000), bad); err == nil {
		t.Fatal("unsorted indices accepted")
	}
}

// TestSumWindowsSignedZeros: the windowed kernel's -0 identity keeps the
// sign of zeros exactly as the merges do (a lone -0 stays -0, -0 + +0 is
// +0).
func TestSumWindowsSignedZeros(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	parts := []*Vector[float32]{
		{Dim: 10000, Indices: []uint32{1, 2, 3}, Values: []float32{negZero, negZero, 0}},
		{Dim: 10000, Indices: []uint32{2, 3, 4}, Values: []float32{negZero, negZero, negZero}},
	}
	var w, m Vector[float32]
	sumWindows(&w, parts, 10000, 6)
	mergeK(&m, parts, 10000, 6)
	sameBits(t, "windows", &w, &m)
	if math.Float32bits(w.Values[0]) != math.Float32bits(negZero) {
		t.Fatalf("lone -0 became %v", w.Values[0])
	}
}
