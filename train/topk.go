package train

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/train/model"
)

// topkReducer is top-k sparsification with error feedback through the
// library's Compressor: each rank adds its gradient to its residual,
// sends the largest entries, and the ranks average what they sent with
// SparseAllreduce (or, with the global scope, keep about k of those sums,
// the largest over every rank, the rest going back to the residuals). With momentum SGD and error feedback it applies Deep
// Gradient Compression's momentum correction (the residual accumulates
// the velocity), so the optimizer applies the result without momentum.
type topkReducer struct {
	z        *sparcml.Compressor[float32]
	momentum bool
}

// newTopK returns the top-k reducer with error feedback of a variant.
func newTopK(comm *sparcml.Comm, v Variant, m model.Model, cfg *Config) (Reducer, error) {
	method, err := compress.ParseMethod(cfg.Select)
	if err != nil {
		return nil, err
	}
	sp := compress.Config{
		Density: v.Density, WarmupEpochs: cfg.WarmupEpochs, Method: method,
		NoErrorFeedback: v.NoEF, NoMomentumMasking: v.NoMask, Seed: cfg.Seed,
	}
	if !v.NoEF {
		sp.Momentum = cfg.Momentum
	}
	if v.PerLayer {
		for _, t := range m.Tensors() {
			sp.LayerSizes = append(sp.LayerSizes, t.Size())
		}
	}
	z, err := sparcml.NewCompressor[float32](comm, len(m.Params()), sparcml.CompressorConfig{Sparsify: sp, Quant: v.Quant, Scope: v.Scope,
		GlobalPeriod: cfg.GlobalPeriod, GlobalWarmupEpochs: cfg.GlobalWarmupEpochs})
	if err != nil {
		return nil, fmt.Errorf("topk: %w", err)
	}
	return &topkReducer{z: z, momentum: sp.Momentum > 0}, nil
}

func (r *topkReducer) Name() string          { return "topk" }
func (r *topkReducer) SparseInput() bool     { return false }
func (r *topkReducer) AppliesMomentum() bool { return r.momentum }

func (r *topkReducer) Reduce(ctx context.Context, st Step, dense []float32, _, out *sparcml.SparseVector[float32]) error {
	r.z.SetEpoch(st.Epoch)
	if _, err := r.z.Reduce(ctx, dense); err != nil {
		return err
	}
	out.Dim, out.Dense, out.Values, out.Indices = len(dense), true, dense, out.Indices[:0]
	return nil
}
