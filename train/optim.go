package train

import (
	"math"

	"github.com/sparcml/sparcml"
)

// sgd is mini-batch SGD with heavy-ball momentum and weight decay, in
// PyTorch's form: v = momentum*v + (g + decay*w); w -= lr*v. With no
// momentum and no decay it touches only the parameters a sparse update
// holds, so a sparse model's step costs its nonzeros, not its dimension.
type sgd struct {
	momentum, decay float64
	v               []float32 // velocity, allocated on first use
}

// step applies the averaged gradient g (dense or sparse) to w.
func (o *sgd) step(w []float32, g *sparcml.SparseVector[float32], lr float64) {
	lr32, mu, wd := float32(lr), float32(o.momentum), float32(o.decay)
	if mu == 0 && wd == 0 {
		if g.Dense {
			for i, x := range g.Values[:len(w)] {
				w[i] -= lr32 * x
			}
			return
		}
		for j, i := range g.Indices {
			w[i] -= lr32 * g.Values[j]
		}
		return
	}
	if o.v == nil {
		o.v = make([]float32, len(w))
	}
	v := o.v
	if g.Dense {
		gv := g.Values[:len(w)]
		for i := range w {
			v[i] = mu*v[i] + gv[i] + wd*w[i]
			w[i] -= lr32 * v[i]
		}
		return
	}
	// Sparse gradient: every parameter's velocity decays and takes its
	// decay term; the stored entries add their gradient.
	for i := range w {
		v[i] = mu*v[i] + wd*w[i]
	}
	for j, i := range g.Indices {
		v[i] += g.Values[j]
	}
	for i := range w {
		w[i] -= lr32 * v[i]
	}
}

// schedule is the learning rate at a fractional epoch: cosine decay
// from lr to 0 over the run (SGDR without restarts), a step decay by 10x
// at half and three quarters of the run, or constant.
type schedule struct {
	kind   string // cosine, step, const
	lr     float64
	epochs float64
}

func (s schedule) at(epoch float64) float64 {
	if s.epochs <= 0 {
		return s.lr
	}
	frac := min(max(epoch/s.epochs, 0), 1)
	switch s.kind {
	case "cosine":
		return s.lr * 0.5 * (1 + math.Cos(math.Pi*frac))
	case "step":
		switch {
		case frac >= 0.75:
			return s.lr / 100
		case frac >= 0.5:
			return s.lr / 10
		}
	}
	return s.lr
}
