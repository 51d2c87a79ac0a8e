package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparcml/sparcml/train/data"
)

func randMat(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// naive is the float64 reference: C + op(A)·op(B).
func naive(m, n, k int, a, b, c []float32, ta, tb bool) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s := float64(c[i*n+j])
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if ta {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if tb {
					bv = b[j*k+p]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = s
		}
	}
	return out
}

func TestGemmAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, w := range []*Workers{nil, NewWorkers(1), NewWorkers(3)} {
		for _, sh := range [][3]int{{1, 1, 1}, {2, 4, 3}, {3, 5, 7}, {7, 9, 1}, {16, 13, 33}, {65, 10, 784}, {5, 4, 0}} {
			m, n, k := sh[0], sh[1], sh[2]
			for _, mode := range []string{"NN", "TN", "NT"} {
				t.Run(fmt.Sprintf("%s/%dx%dx%d/w%d", mode, m, n, k, w.N()), func(t *testing.T) {
					a, b, c := randMat(rng, m*k), randMat(rng, k*n), randMat(rng, m*n)
					want := naive(m, n, k, a, b, c, mode == "TN", mode == "NT")
					switch mode {
					case "NN":
						w.MulNN(m, n, k, a, b, c)
					case "TN":
						w.MulTN(m, n, k, a, b, c)
					case "NT":
						w.MulNT(m, n, k, a, b, c)
					}
					for i := range c {
						if d := math.Abs(float64(c[i]) - want[i]); d > 1e-4*(1+math.Sqrt(float64(k))) {
							t.Fatalf("element %d: got %v want %v", i, c[i], want[i])
						}
					}
				})
			}
		}
	}
}

// BenchmarkGemm times the three products at the shapes of the default
// MLP's first layer with a per-rank batch of 64 (bytes = flops).
func BenchmarkGemm(b *testing.B) {
	const batch, in, out = 64, 784, 1024
	rng := rand.New(rand.NewPCG(1, 2))
	x, w, y := randMat(rng, batch*in), randMat(rng, in*out), randMat(rng, batch*out)
	gw, dx := make([]float32, in*out), make([]float32, batch*in)
	for _, workers := range []int{1, 2} {
		wk := NewWorkers(workers)
		b.Run(fmt.Sprintf("NN/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(2 * batch * in * out)
			for b.Loop() {
				wk.MulNN(batch, out, in, x, w, y)
			}
		})
		b.Run(fmt.Sprintf("TN/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(2 * batch * in * out)
			for b.Loop() {
				wk.MulTN(in, out, batch, x, y, gw)
			}
		})
		b.Run(fmt.Sprintf("NT/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(2 * batch * in * out)
			for b.Loop() {
				wk.MulNT(batch, in, out, y, w, dx)
			}
		})
	}
}

// BenchmarkMLPGradient times one gradient of the default mlp
// (784-1024-256-10) on a batch of 64, and reports samples per second.
func BenchmarkMLPGradient(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			m, err := NewMLP([]int{784, 1024, 256, 10}, 1, NewWorkers(workers))
			if err != nil {
				b.Fatal(err)
			}
			s := denseSet(rng, 64, 784, 10)
			rows := allRows(64)
			grad := make([]float32, len(m.Params()))
			for b.Loop() {
				m.Gradient(data.Batch{Set: s, Rows: rows}, grad)
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
