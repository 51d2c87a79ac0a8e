package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/apihook"
	"github.com/sparcml/sparcml/internal/simrun"
)

// benchCompress times `--op compress`: the Compressor's whole reduction
// (Reduce: accumulation into the residual, selection, the reduction of
// the selected entries, the average written back), one Compressor per
// --scope, the scopes taking turns iteration by iteration as --algo's
// list does, every iteration on a fresh seeded gradient. With --check
// every rank recomputes every step locally (compressReference) and
// compares its result and its residual with it.
func benchCompress[T sparcml.Float](ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int, d float64) ([]result, error) {
	cases := make([]*compressCase[T], len(cfg.scopes))
	for i, s := range cfg.scopes {
		zc := sparcml.CompressorConfig{
			Sparsify: compress.Config{Density: d, Method: cfg.selectMethod, Seed: cfg.seed},
			Quant:    cfg.quant, Scope: s, GlobalPeriod: cfg.globalPeriod,
		}
		z, err := sparcml.NewCompressor[T](c, n, zc)
		if err != nil {
			return nil, err
		}
		cs := &compressCase[T]{scope: s, z: z, times: make([]float64, cfg.iters)}
		if cfg.check {
			if cs.ref, err = newCompressReference[T](c.Size(), n, zc); err != nil {
				return nil, err
			}
		}
		cases[i] = cs
	}
	grad := make([]T, n)
	for it := -cfg.warmup; it < cfg.iters; it++ {
		for j := range cases {
			cs := cases[(j+it+cfg.warmup)%len(cases)]
			step := it + cfg.warmup
			compressGradient(grad, cfg.seed, step, c.Rank())
			if err := c.Barrier(ctx); err != nil {
				return nil, err
			}
			before := c.Stats()
			t0 := time.Now()
			st, err := cs.z.Reduce(ctx, grad)
			if err != nil {
				return nil, fmt.Errorf("--scope %v: %w", cs.scope, err)
			}
			elapsed := time.Since(t0).Seconds()
			if cs.ref != nil {
				wrong, err := cs.ref.check(ctx, c, cfg, step, st, grad, residualOf(cs.z))
				if err != nil {
					return nil, err
				}
				if it >= 0 {
					cs.wrong += wrong
				}
			}
			if it >= 0 {
				cs.times[it] = elapsed
				cs.sent += c.Stats().Sub(before).BytesSent
				cs.kept += float64(st.NNZOut)
				cs.last = st
			}
		}
	}
	rows := make([]result, 0, len(cases))
	for _, cs := range cases {
		row, err := cs.row(ctx, c, cfg, n, d)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// compressCase is one scope of the compress benchmark.
type compressCase[T sparcml.Float] struct {
	scope compress.Scope
	z     *sparcml.Compressor[T]
	ref   *compressReference[T]
	times []float64
	sent  uint64  // payload bytes this rank sent in the timed iterations
	kept  float64 // entries of the results of the timed iterations
	wrong int64
	last  sparcml.CompressStats
}

// row is the case's result row: times and bytes as summarize makes them,
// the entries kept (mean over the timed iterations), K and Ok-Topk's
// bound 6K(P-1)/P entries of an index and a value.
func (cs *compressCase[T]) row(ctx context.Context, c *sparcml.Comm, cfg *benchConfig, n int, d float64) (result, error) {
	vs := collectives.DTypeOf[T]().Size()
	op := sparseSized{n: n, bytes: int64(n) * int64(vs)}
	row, err := summarize(ctx, c, cfg, op, cs.times, cs.wrong, float64(cs.sent)/float64(cfg.iters), cs.last.Algo, c.Transport())
	if err != nil {
		return result{}, err
	}
	p := c.Size()
	row.Algo, row.Scope, row.Select = cs.scope.String(), cs.scope.String(), cfg.selectMethod.String()
	row.Density, row.NNZIn, row.NNZOut = d, cs.last.Selected, cs.last.NNZOut
	row.K, row.Kept = cs.last.K, math.Round(cs.kept/float64(cfg.iters)*10)/10
	row.BoundBytes = int64(6 * float64(cs.last.K) * float64(p-1) / float64(p) * float64(4+vs))
	return row, nil
}

// compressGradient is rank's gradient at a step (simrun.CompressGradient).
func compressGradient[T sparcml.Float](dst []T, seed uint64, step, rank int) {
	simrun.CompressGradient(dst, seed, step, rank)
}

// residualOf is z's error-feedback residual, which the API does not
// export; the root package registers the accessor (internal/apihook).
func residualOf[T sparcml.Float](z *sparcml.Compressor[T]) []T {
	return apihook.Get[func(*sparcml.Compressor[T]) *compress.Sparsifier[T]]()(z).Residual()
}
