package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/sparcml/sparcml/train/data"
)

// MLP is a multi-layer perceptron classifier: dense layers with ReLU
// between them and a softmax cross-entropy loss on the last. Layer l maps
// Sizes[l] inputs to Sizes[l+1] outputs: y = x·w_l + b_l with w_l of shape
// [Sizes[l], Sizes[l+1]].
type MLP struct {
	sizes  []int
	params []float32
	ts     []Tensor
	work   *Workers

	// Scratch of the last batch size: acts[0] the gathered inputs,
	// acts[l+1] layer l's outputs (after ReLU for hidden layers, the
	// log-probabilities for the last); deltas[l] the loss's gradient
	// with respect to layer l's pre-activation outputs.
	rows   int
	acts   [][]float32
	deltas [][]float32
}

// NewMLP returns an MLP of the given layer sizes (inputs, hidden...,
// classes) with He-initialized weights (normal, variance 2/inputs) drawn
// from seed and zero biases, computing on work (nil: the caller's
// goroutine).
func NewMLP(sizes []int, seed uint64, work *Workers) (*MLP, error) {
	if len(sizes) < 2 {
		return nil, fmt.Errorf("mlp: need at least inputs and outputs, got sizes %v", sizes)
	}
	for _, s := range sizes {
		if s < 1 {
			return nil, fmt.Errorf("mlp: layer size %d in %v", s, sizes)
		}
	}
	if sizes[len(sizes)-1] < 2 {
		return nil, fmt.Errorf("mlp: %d output classes (want at least 2)", sizes[len(sizes)-1])
	}
	m := &MLP{sizes: append([]int(nil), sizes...), work: work}
	off := 0
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		m.ts = append(m.ts,
			Tensor{Name: fmt.Sprintf("w%d", l), Shape: []int{in, out}, Offset: off},
			Tensor{Name: fmt.Sprintf("b%d", l), Shape: []int{out}, Offset: off + in*out})
		off += in*out + out
	}
	if off > math.MaxInt32 {
		return nil, fmt.Errorf("mlp: %d parameters is too many", off)
	}
	m.params = make([]float32, off)
	rng := rand.New(rand.NewPCG(seed, 0x6d6c70))
	for l := 0; l+1 < len(sizes); l++ {
		w := m.ts[2*l]
		std := math.Sqrt(2 / float64(sizes[l]))
		for i := range w.Size() {
			m.params[w.Offset+i] = float32(rng.NormFloat64() * std)
		}
	}
	return m, nil
}

// Params is the flat parameter vector.
func (m *MLP) Params() []float32 { return m.params }

// Tensors lists w0, b0, w1, b1, ...
func (m *MLP) Tensors() []Tensor { return m.ts }

// Classes is the size of the last layer.
func (m *MLP) Classes() int { return m.sizes[len(m.sizes)-1] }

// Describe names the shape and parameter count.
func (m *MLP) Describe() string {
	s := make([]string, len(m.sizes))
	for i, v := range m.sizes {
		s[i] = fmt.Sprint(v)
	}
	return fmt.Sprintf("mlp %s, %d parameters", strings.Join(s, "-"), len(m.params))
}

// layer returns layer l's weights and biases.
func (m *MLP) layer(l int) (w, b []float32) {
	tw, tb := m.ts[2*l], m.ts[2*l+1]
	return m.params[tw.Offset : tw.Offset+tw.Size()], m.params[tb.Offset : tb.Offset+tb.Size()]
}

func (m *MLP) scratch(rows int) {
	if rows <= m.rows {
		return
	}
	m.rows = rows
	m.acts = make([][]float32, len(m.sizes))
	m.deltas = make([][]float32, len(m.sizes)-1)
	for l, s := range m.sizes {
		m.acts[l] = make([]float32, rows*s)
		if l > 0 {
			m.deltas[l-1] = make([]float32, rows*s)
		}
	}
}

// gather copies the batch's samples into acts[0], densifying sparse rows.
func (m *MLP) gather(b data.Batch) {
	in := m.sizes[0]
	x := m.acts[0][:b.Len()*in]
	for i, r := range b.Rows {
		dst := x[i*in : (i+1)*in]
		idx, val := b.Set.Row(r)
		if idx == nil {
			copy(dst, val)
			continue
		}
		clear(dst)
		for j, f := range idx {
			dst[f] = val[j]
		}
	}
}

// forward computes every layer's outputs for the gathered batch of n rows,
// the last as log-probabilities, and returns the summed loss.
func (m *MLP) forward(b data.Batch) float64 {
	n := b.Len()
	m.scratch(n)
	m.gather(b)
	L := len(m.sizes) - 1
	for l := 0; l < L; l++ {
		in, out := m.sizes[l], m.sizes[l+1]
		w, bias := m.layer(l)
		y := m.acts[l+1][:n*out]
		for i := 0; i < n; i++ {
			copy(y[i*out:(i+1)*out], bias)
		}
		m.work.MulNN(n, out, in, m.acts[l][:n*in], w, y)
		if l < L-1 {
			for i, v := range y {
				y[i] = max(v, 0)
			}
		}
	}
	k := m.Classes()
	var loss float64
	z := m.acts[L]
	for i, r := range b.Rows {
		loss += logSoftmax(z[i*k:(i+1)*k], b.Set.Labels[r])
	}
	return loss
}

// Gradient overwrites grad with the gradient of the batch's mean loss.
func (m *MLP) Gradient(b data.Batch, grad []float32) float64 {
	n := b.Len()
	if n == 0 {
		clear(grad)
		return 0
	}
	loss := m.forward(b)
	L := len(m.sizes) - 1
	k := m.Classes()
	// The last layer's delta: (softmax - onehot) / n.
	d := m.deltas[L-1][:n*k]
	inv := 1 / float32(n)
	for i, r := range b.Rows {
		lp := m.acts[L][i*k : (i+1)*k]
		di := d[i*k : (i+1)*k]
		for c, v := range lp {
			di[c] = float32(math.Exp(float64(v))) * inv
		}
		di[b.Set.Labels[r]] -= inv
	}
	for l := L - 1; l >= 0; l-- {
		in, out := m.sizes[l], m.sizes[l+1]
		tw, tb := m.ts[2*l], m.ts[2*l+1]
		gw := grad[tw.Offset : tw.Offset+tw.Size()]
		gb := grad[tb.Offset : tb.Offset+tb.Size()]
		dl := m.deltas[l][:n*out]
		clear(gw)
		m.work.MulTN(in, out, n, m.acts[l][:n*in], dl, gw)
		clear(gb)
		for i := 0; i < n; i++ {
			for j, v := range dl[i*out : (i+1)*out] {
				gb[j] += v
			}
		}
		if l == 0 {
			break
		}
		// The previous layer's delta: dl·wᵀ where its ReLU was active.
		w, _ := m.layer(l)
		dp := m.deltas[l-1][:n*in]
		clear(dp)
		m.work.MulNT(n, in, out, dl, w, dp)
		for i, a := range m.acts[l][:n*in] {
			if a <= 0 {
				dp[i] = 0
			}
		}
	}
	return loss / float64(n)
}

// Evaluate returns the summed loss and the number of right predictions.
func (m *MLP) Evaluate(b data.Batch) (float64, int) {
	if b.Len() == 0 {
		return 0, 0
	}
	loss := m.forward(b)
	k := m.Classes()
	z := m.acts[len(m.sizes)-1]
	right := 0
	for i, r := range b.Rows {
		if argmax(z[i*k:(i+1)*k]) == int(b.Set.Labels[r]) {
			right++
		}
	}
	return loss, right
}
