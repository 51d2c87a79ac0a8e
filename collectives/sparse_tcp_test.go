package collectives_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/fallback"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/sparse"
)

// TestSparseAllreduceOverTCP runs every algorithm over the TCP transport on
// loopback, where sends complete asynchronously, so buffer lifetimes are
// exercised for real; several operations back to back on the same pools.
func TestSparseAllreduceOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback TCP")
	}
	const p, dim = 5, 20000
	store := bootstrap.NewMemStore()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]*fallback.Transport, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = fallback.New(ctx, fallback.Config{Rank: r, Size: p, Store: store, Token: []byte("sparse-test-token-0123456789abcdef")})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer ts[r].Close()
	}
	rng := rand.New(rand.NewPCG(11, 11))
	pools := make([]*collectives.Buffers, p)
	for r := range pools {
		pools[r] = &collectives.Buffers{}
	}
	seq := uint64(0)
	for _, kind := range []string{"1%", "50%", "skewed", "mixed"} {
		for _, ac := range spAlgoCases {
			in := spInputs[float32](rng, p, dim, kind)
			ref := spReference(in)
			seq++
			outs := make([]*sparse.Vector[float32], p)
			for r := range p {
				wg.Add(1)
				go func() {
					defer wg.Done()
					op := &collectives.Op{Ctx: ctx, T: ts[r], Comm: 1, Seq: seq, Pool: pools[r]}
					outs[r] = &sparse.Vector[float32]{}
					_, errs[r] = collectives.SparseAllreduce(op, in[r], outs[r], ac.opts)
				}()
			}
			wg.Wait()
			for r := range p {
				if errs[r] != nil {
					t.Fatalf("%s %s: rank %d: %v", kind, ac.name, r, errs[r])
				}
				if err := spCheckResult(outs[r], ref, dim); err != nil {
					t.Fatalf("%s %s: rank %d: %v", kind, ac.name, r, err)
				}
			}
		}
	}
	// Bad input on one rank fails every rank over TCP too, and the
	// transport stays usable for the next operation.
	for _, ac := range spAlgoCases[:6] {
		in := spInputs[float32](rng, p, dim, "1%")
		in[2] = &sparse.Vector[float32]{Dim: dim, Indices: []uint32{9, 3}, Values: []float32{1, 1}}
		seq++
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := &collectives.Op{Ctx: ctx, T: ts[r], Comm: 1, Seq: seq, Pool: pools[r]}
				_, errs[r] = collectives.SparseAllreduce(op, in[r], &sparse.Vector[float32]{}, ac.opts)
			}()
		}
		wg.Wait()
		for r := range p {
			if errs[r] == nil {
				t.Fatalf("%s: rank %d succeeded with bad input on rank 2", ac.name, r)
			}
		}
	}
}
