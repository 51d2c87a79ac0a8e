package main

import (
	"context"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/internal/simrun"
)

// compressReference is `--op compress --check`'s reference, the one
// `sparcml sim --op compress --check` uses too (simrun.CompressReference):
// every rank recomputes every rank's selection locally.
type compressReference[T sparcml.Float] struct {
	*simrun.CompressReference[T]
}

func newCompressReference[T sparcml.Float](p, n int, zc sparcml.CompressorConfig) (*compressReference[T], error) {
	r, err := simrun.NewCompressReference[T](p, n, zc.Sparsify, zc.Scope)
	return &compressReference[T]{r}, err
}

// check advances the reference by one step and returns the number of
// elements of this rank's result and residual that differ from it.
func (r *compressReference[T]) check(_ context.Context, c *sparcml.Comm, cfg *benchConfig, step int, st sparcml.CompressStats, got, residual []T) (int64, error) {
	if err := r.Step(cfg.seed, step, st.Global); err != nil {
		return 0, err
	}
	wrong := countWrong(got, r.Want(), 0, cfg.injectWrong)
	if res := r.Residual(c.Rank()); res != nil {
		wrong += countWrong(residual, res, 0, 0)
	}
	return wrong, nil
}
