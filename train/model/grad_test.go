package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/data"
)

// The reference losses below are written independently of the models,
// in float64 and with plain loops, and differentiated by central
// differences.

func refMLPLoss(sizes []int, p []float64, s *data.Set, rows []int) float64 {
	var total float64
	for _, r := range rows {
		_, x32 := s.Row(r)
		x := make([]float64, len(x32))
		for i, v := range x32 {
			x[i] = float64(v)
		}
		off := 0
		for l := 0; l+1 < len(sizes); l++ {
			in, out := sizes[l], sizes[l+1]
			y := make([]float64, out)
			for j := range out {
				y[j] = p[off+in*out+j]
				for i := range in {
					y[j] += x[i] * p[off+i*out+j]
				}
			}
			if l+2 < len(sizes) {
				for j := range y {
					y[j] = math.Max(y[j], 0)
				}
			}
			off += in*out + out
			x = y
		}
		total += refCrossEntropy(x, int(s.Labels[r]))
	}
	return total / float64(len(rows))
}

func refCrossEntropy(z []float64, y int) float64 {
	var s float64
	for _, v := range z {
		s += math.Exp(v)
	}
	return math.Log(s) - z[y]
}

func refLogRegLoss(dim, classes int, p []float64, s *data.Set, rows []int) float64 {
	outs := classes
	if classes == 2 {
		outs = 1
	}
	var total float64
	for _, r := range rows {
		z := make([]float64, outs)
		copy(z, p[dim*outs:])
		idx, val := s.Row(r)
		for j, v := range val {
			f := j
			if idx != nil {
				f = int(idx[j])
			}
			for k := range outs {
				z[k] += float64(v) * p[f*outs+k]
			}
		}
		y := int(s.Labels[r])
		if outs == 1 {
			total += math.Log(1+math.Exp(z[0])) - float64(y)*z[0]
		} else {
			total += refCrossEntropy(z, y)
		}
	}
	return total / float64(len(rows))
}

// checkGradient compares grad with central differences of loss at p,
// at every index in which.
func checkGradient(t *testing.T, p32 []float32, grad []float32, which []int, loss func([]float64) float64) {
	t.Helper()
	p := make([]float64, len(p32))
	for i, v := range p32 {
		p[i] = float64(v)
	}
	const h = 1e-5
	for _, i := range which {
		save := p[i]
		p[i] = save + h
		up := loss(p)
		p[i] = save - h
		down := loss(p)
		p[i] = save
		fd := (up - down) / (2 * h)
		if d := math.Abs(float64(grad[i]) - fd); d > 1e-4+1e-3*math.Abs(fd) {
			t.Errorf("parameter %d: gradient %.7g, finite differences %.7g", i, grad[i], fd)
		}
	}
}

func denseSet(rng *rand.Rand, n, dim, classes int) *data.Set {
	s := &data.Set{Name: "test", Dim: dim, Classes: classes, X: make([]float32, n*dim), Labels: make([]int32, n)}
	for i := range s.X {
		s.X[i] = float32(rng.Float64())
	}
	for i := range s.Labels {
		s.Labels[i] = int32(rng.IntN(classes))
	}
	return s
}

func sparseSet(rng *rand.Rand, n, dim, classes, nnz int) *data.Set {
	s := &data.Set{Name: "test", Dim: dim, Classes: classes, RowPtr: []int{0}, Labels: make([]int32, n)}
	for r := 0; r < n; r++ {
		f := 0
		for len(s.Idx) < s.RowPtr[r]+nnz && f < dim {
			f += 1 + rng.IntN(3)
			if f-1 < dim {
				s.Idx = append(s.Idx, uint32(f-1))
				s.Val = append(s.Val, float32(rng.NormFloat64()))
			}
		}
		s.RowPtr = append(s.RowPtr, len(s.Idx))
		s.Labels[r] = int32(rng.IntN(classes))
	}
	return s
}

func allRows(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

func TestMLPGradientFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{7, 6, 5, 3}
	for _, w := range []*Workers{nil, NewWorkers(2)} {
		m, err := NewMLP(sizes, 9, w)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Params() { // nonzero biases too
			m.Params()[i] += float32(0.1 * rng.NormFloat64())
		}
		s := denseSet(rng, 5, 7, 3)
		rows := []int{4, 0, 2, 2, 1}
		grad := make([]float32, len(m.Params()))
		loss := m.Gradient(data.Batch{Set: s, Rows: rows}, grad)
		ref := func(p []float64) float64 { return refMLPLoss(sizes, p, s, rows) }
		p64 := make([]float64, len(m.Params()))
		for i, v := range m.Params() {
			p64[i] = float64(v)
		}
		if d := math.Abs(loss - ref(p64)); d > 1e-5 {
			t.Fatalf("loss %v, reference %v", loss, ref(p64))
		}
		checkGradient(t, m.Params(), grad, allRows(len(grad)), ref)
		sum, _ := m.Evaluate(data.Batch{Set: s, Rows: rows})
		if d := math.Abs(sum/5 - loss); d > 1e-5 {
			t.Fatalf("Evaluate's loss %v, Gradient's %v", sum/5, loss)
		}
	}
}

func TestLogRegGradientFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, classes := range []int{2, 4} {
		for _, sparseData := range []bool{true, false} {
			dim := 20
			m, err := NewLogReg(dim, classes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range m.Params() {
				m.Params()[i] = float32(0.3 * rng.NormFloat64())
			}
			var s *data.Set
			if sparseData {
				s = sparseSet(rng, 6, dim, classes, 4)
			} else {
				s = denseSet(rng, 6, dim, classes)
			}
			rows := []int{5, 1, 3, 1}
			b := data.Batch{Set: s, Rows: rows}
			grad := make([]float32, len(m.Params()))
			loss := m.Gradient(b, grad)
			ref := func(p []float64) float64 { return refLogRegLoss(dim, classes, p, s, rows) }
			checkGradient(t, m.Params(), grad, allRows(len(grad)), ref)

			// The sparse gradient is the dense one restricted to what
			// the batch touches, and zero elsewhere.
			var g sparcml.SparseVector[float32]
			sloss := m.SparseGradient(b, &g)
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			if sloss != loss {
				t.Fatalf("sparse loss %v, dense %v", sloss, loss)
			}
			dense := make([]float32, len(grad))
			for j, i := range g.Indices {
				dense[i] = g.Values[j]
			}
			for i := range grad {
				if math.Abs(float64(dense[i]-grad[i])) > 1e-6 {
					t.Fatalf("classes %d sparse %v: parameter %d sparse %v dense %v", classes, sparseData, i, dense[i], grad[i])
				}
			}
			// A second call starts from zero (the scratch is cleared).
			m.SparseGradient(b, &g)
			for j, i := range g.Indices {
				if g.Values[j] != dense[i] {
					t.Fatalf("second sparse gradient differs at %d", i)
				}
			}
			sum, _ := m.Evaluate(b)
			if d := math.Abs(sum/4 - loss); d > 1e-5 {
				t.Fatalf("Evaluate's loss %v, Gradient's %v", sum/4, loss)
			}
		}
	}
}
