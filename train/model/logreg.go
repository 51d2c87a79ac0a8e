package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/data"
)

// LogReg is logistic regression on Dim features: binary (one output, the
// sigmoid of x·w0 + b0) for two classes, multinomial (softmax over
// Classes outputs) otherwise. w0 has shape [Dim, outputs]: feature f's
// weights are contiguous, so a mini-batch's gradient is nonzero only in
// the rows of the features present in the batch, plus b0.
type LogReg struct {
	dim, classes, outs int
	params             []float32
	ts                 []Tensor

	// Sparse gradient scratch: acc (dim*outs) summed per touched
	// feature, touched lists them, mark flags them (one bit each).
	acc     []float32
	mark    []uint64
	touched []uint32
	bias    []float32
	z       []float32
}

// NewLogReg returns a logistic regression of dim features and classes
// classes (2: binary) with zero weights.
func NewLogReg(dim, classes int) (*LogReg, error) {
	if dim < 1 || classes < 2 {
		return nil, fmt.Errorf("logreg: %d features and %d classes (want at least 1 and 2)", dim, classes)
	}
	outs := classes
	if classes == 2 {
		outs = 1
	}
	n := dim*outs + outs
	if n > math.MaxUint32 {
		return nil, fmt.Errorf("logreg: %d features x %d outputs does not fit 32-bit indices", dim, outs)
	}
	m := &LogReg{dim: dim, classes: classes, outs: outs, params: make([]float32, n)}
	m.ts = []Tensor{
		{Name: "w0", Shape: []int{dim, outs}, Offset: 0},
		{Name: "b0", Shape: []int{outs}, Offset: dim * outs},
	}
	m.z = make([]float32, outs)
	m.bias = make([]float32, outs)
	return m, nil
}

// Params is the flat parameter vector.
func (m *LogReg) Params() []float32 { return m.params }

// Tensors lists w0 and b0.
func (m *LogReg) Tensors() []Tensor { return m.ts }

// Classes is the number of classes.
func (m *LogReg) Classes() int { return m.classes }

// Describe names the kind and parameter count.
func (m *LogReg) Describe() string {
	kind := "binary"
	if m.outs > 1 {
		kind = fmt.Sprintf("multinomial, %d classes", m.classes)
	}
	return fmt.Sprintf("logreg %s, %d features, %d parameters", kind, m.dim, len(m.params))
}

// logits sets m.z to sample r's outputs.
func (m *LogReg) logits(s *data.Set, r int) []float32 {
	K := m.outs
	z := m.z
	copy(z, m.params[m.dim*K:])
	idx, val := s.Row(r)
	if K == 1 {
		var acc float32
		if idx == nil {
			for f, v := range val {
				acc += v * m.params[f]
			}
		} else {
			for j, f := range idx {
				acc += val[j] * m.params[f]
			}
		}
		z[0] += acc
		return z
	}
	for j, v := range val {
		if v == 0 {
			continue
		}
		f := j
		if idx != nil {
			f = int(idx[j])
		}
		w := m.params[f*K : f*K+K]
		for k := range z {
			z[k] += v * w[k]
		}
	}
	return z
}

// lossGrad turns z into the gradient of the loss with respect to the
// logits, scaled by scale, and returns the loss of label y.
func (m *LogReg) lossGrad(z []float32, y int32, scale float32) float64 {
	if m.outs == 1 {
		zz := float64(z[0])
		t := float64(y)
		z[0] = float32(sigmoid(zz)-t) * scale
		return softplus(zz) - t*zz
	}
	loss := logSoftmax(z, y)
	for k, v := range z {
		z[k] = float32(math.Exp(float64(v))) * scale
	}
	z[y] -= scale
	return loss
}

// Gradient overwrites grad with the batch's mean-loss gradient.
func (m *LogReg) Gradient(b data.Batch, grad []float32) float64 {
	clear(grad)
	if b.Len() == 0 {
		return 0
	}
	K := m.outs
	scale := 1 / float32(b.Len())
	gb := grad[m.dim*K:]
	var loss float64
	for _, r := range b.Rows {
		dz := m.logits(b.Set, r)
		loss += m.lossGrad(dz, b.Set.Labels[r], scale)
		idx, val := b.Set.Row(r)
		for j, v := range val {
			f := j
			if idx != nil {
				f = int(idx[j])
			}
			g := grad[f*K : f*K+K]
			for k, d := range dz {
				g[k] += v * d
			}
		}
		for k, d := range dz {
			gb[k] += d
		}
	}
	return loss / float64(b.Len())
}

// SparseGradient sets g to the batch's mean-loss gradient over the
// parameters it touches: the weights of every feature present in the
// batch (all outputs of each) and the biases, in increasing order.
func (m *LogReg) SparseGradient(b data.Batch, g *sparcml.SparseVector[float32]) float64 {
	K := m.outs
	g.Reset(len(m.params))
	if m.acc == nil {
		m.acc = make([]float32, m.dim*K)
		m.mark = make([]uint64, (m.dim+63)/64)
	}
	bias := m.bias
	clear(bias)
	scale := float32(1)
	if b.Len() > 0 {
		scale = 1 / float32(b.Len())
	}
	var loss float64
	m.touched = m.touched[:0]
	for _, r := range b.Rows {
		dz := m.logits(b.Set, r)
		loss += m.lossGrad(dz, b.Set.Labels[r], scale)
		idx, val := b.Set.Row(r)
		for j, v := range val {
			f := j
			if idx != nil {
				f = int(idx[j])
			} else if v == 0 {
				continue
			}
			if m.mark[f/64]&(1<<(f%64)) == 0 {
				m.mark[f/64] |= 1 << (f % 64)
				m.touched = append(m.touched, uint32(f))
			}
			a := m.acc[f*K : f*K+K]
			for k, d := range dz {
				a[k] += v * d
			}
		}
		for k, d := range dz {
			bias[k] += d
		}
	}
	slices.Sort(m.touched)
	for _, f := range m.touched {
		a := m.acc[int(f)*K : int(f)*K+K]
		for k := range a {
			g.Indices = append(g.Indices, f*uint32(K)+uint32(k))
			g.Values = append(g.Values, a[k])
			a[k] = 0
		}
		m.mark[f/64] &^= 1 << (f % 64)
	}
	base := uint32(m.dim * K)
	for k, v := range bias {
		g.Indices = append(g.Indices, base+uint32(k))
		g.Values = append(g.Values, v)
	}
	if b.Len() == 0 {
		return 0
	}
	return loss / float64(b.Len())
}

// Evaluate returns the summed loss and the number of right predictions.
func (m *LogReg) Evaluate(b data.Batch) (float64, int) {
	var loss float64
	right := 0
	for _, r := range b.Rows {
		y := b.Set.Labels[r]
		z := m.logits(b.Set, r)
		pred := 0
		if m.outs == 1 {
			if z[0] > 0 {
				pred = 1
			}
			zz := float64(z[0])
			loss += softplus(zz) - float64(y)*zz
		} else {
			pred = argmax(z)
			loss += logSoftmax(z, y)
		}
		if pred == int(y) {
			right++
		}
	}
	return loss, right
}
