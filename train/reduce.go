package train

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/model"
)

// Step says where in the training a reduction happens, for reducers
// whose behaviour changes over time (a density warm-up).
type Step struct {
	Step  int     // 0-based
	Epoch float64 // fractional epochs done
}

// Reducer turns this rank's gradient of a step into the average of every
// rank's, the same on every rank. A reducer with SparseInput takes the
// gradient in sparse form (the parameters the batch touched), any other
// the dense gradient; both leave the average in out, dense or sparse.
type Reducer interface {
	// Name is the reduction as written on the command line
	// (dense, sparse, topk).
	Name() string
	// SparseInput reports whether Reduce reads the sparse gradient.
	SparseInput() bool
	// Reduce averages the gradient. dense may be modified.
	Reduce(ctx context.Context, st Step, dense []float32, sparse, out *sparcml.SparseVector[float32]) error
}

// Momentum is implemented by reducers that apply SGD momentum
// themselves (Deep Gradient Compression's momentum correction
// accumulates velocity before selecting); the optimizer then applies
// their output without momentum of its own.
type Momentum interface {
	AppliesMomentum() bool
}

// denseReducer is the dense allreduce of the whole gradient.
type denseReducer struct {
	comm *sparcml.Comm
	opts []sparcml.CallOption
}

func (r *denseReducer) Name() string      { return "dense" }
func (r *denseReducer) SparseInput() bool { return false }

func (r *denseReducer) Reduce(ctx context.Context, _ Step, dense []float32, _, out *sparcml.SparseVector[float32]) error {
	if err := sparcml.Allreduce(ctx, r.comm, dense, sparcml.Avg, r.opts...); err != nil {
		return err
	}
	out.Dim, out.Dense, out.Values, out.Indices = len(dense), true, dense, out.Indices[:0]
	return nil
}

// sparseReducer is the exact sparse allreduce of a gradient sparse by
// nature: only the entries the ranks' batches touched move, and the cost
// model picks the algorithm (and the dense form when the union is large).
type sparseReducer struct {
	comm *sparcml.Comm
	opts []sparcml.CallOption
}

func (r *sparseReducer) Name() string      { return "sparse" }
func (r *sparseReducer) SparseInput() bool { return true }

func (r *sparseReducer) Reduce(ctx context.Context, _ Step, _ []float32, in, out *sparcml.SparseVector[float32]) error {
	_, err := sparcml.SparseAllreduce(ctx, r.comm, in, out, sparcml.Avg, r.opts...)
	return err
}

// newReducer returns the reducer of a variant for model m.
func newReducer(comm *sparcml.Comm, v Variant, m model.Model, cfg *Config) (Reducer, error) {
	var opts []sparcml.CallOption
	if v.Quant != sparcml.QuantNone && v.Reduce != "topk" { // topk's compressor encodes its own values
		opts = append(opts, sparcml.WithQuant(v.Quant))
	}
	switch v.Reduce {
	case "dense":
		return &denseReducer{comm: comm, opts: opts}, nil
	case "sparse":
		if _, ok := m.(model.SparseModel); !ok {
			return nil, fmt.Errorf("--reduce sparse needs a model whose gradients are sparse by nature (logreg); the mlp's are dense: use dense or topk")
		}
		// One gradient every step, whose density the batches keep about
		// even: it reuses the counts exchange's decision (WithTensor).
		return &sparseReducer{comm: comm, opts: append(opts, sparcml.WithTensor(0))}, nil
	case "topk":
		return newTopK(comm, v, m, cfg)
	}
	return nil, fmt.Errorf("unknown reduction %q (want dense, sparse or topk)", v.Reduce)
}
