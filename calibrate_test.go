package sparcml

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A model with the within-host figures calibration fills in a job of
// several hosts still agrees in the sparse allreduce's start-up exchange,
// and the result is the sum of every rank's entries.
func TestSparseAllreduceWithLocalModel(t *testing.T) {
	const p, dim = 3, 1000
	comms := localJob(t, p)
	for _, c := range comms {
		c.model.LocalAlpha, c.model.LocalBeta = 3e-5, 1e-10
		c.model.SparseGamma = 2e-9
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outs := make([]*SparseVector[float32], p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := NewSparseVector(dim, []uint32{uint32(r), 500}, []float32{1, float32(r + 1)})
			if err != nil {
				errs[r] = err
				return
			}
			outs[r] = &SparseVector[float32]{}
			_, errs[r] = SparseAllreduce(ctx, c, in, outs[r], Sum)
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, []uint32{0, 1, 2, 500}, outs[r].Indices, "rank %d", r)
		require.Equal(t, []float32{1, 1, 1, 6}, outs[r].Values, "rank %d", r)
	}
}
