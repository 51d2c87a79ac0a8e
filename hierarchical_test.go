package sparcml

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/topology"
	"github.com/stretchr/testify/require"
)

// localOnHosts returns in-process communicators whose ranks the
// collectives take to run on the hosts of hostOf.
func localOnHosts(t *testing.T, hostOf []int) []*Comm {
	t.Helper()
	comms, err := Local(len(hostOf))
	require.NoError(t, err)
	for _, c := range comms {
		c.topo = topology.New(hostOf)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// runAll runs fn on every communicator at once, with a deadline.
func runAll(t *testing.T, comms []*Comm, fn func(ctx context.Context, c *Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(ctx, c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// The public collectives with AlgoHierarchical, on ranks dealt over two
// hosts, give the sums computed here from every rank's input.
func TestHierarchicalThroughComm(t *testing.T) {
	hostOf := []int{0, 1, 0, 1, 0, 1}
	comms := localOnHosts(t, hostOf)
	p, n := len(comms), 1000
	input := func(r int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32((r+1)*(i%13) - 6)
		}
		return v
	}
	want := make([]float32, n)
	for r := range p {
		for i, x := range input(r) {
			want[i] += x
		}
	}
	hier := WithAlgo(AlgoHierarchical)

	results := make([][]float32, p)
	runAll(t, comms, func(ctx context.Context, c *Comm) error {
		v := input(c.Rank())
		results[c.Rank()] = v
		return Allreduce(ctx, c, v, Sum, hier)
	})
	for r := range p {
		require.Equal(t, want, results[r], "allreduce, rank %d", r)
	}

	m := n / p
	runAll(t, comms, func(ctx context.Context, c *Comm) error {
		out := make([]float32, m)
		results[c.Rank()] = out
		return ReduceScatter(ctx, c, input(c.Rank())[:p*m], out, Sum, hier)
	})
	for r := range p {
		require.Equal(t, want[r*m:(r+1)*m], results[r], "reduce-scatter, rank %d", r)
	}

	runAll(t, comms, func(ctx context.Context, c *Comm) error {
		out := make([]float32, p*m)
		results[c.Rank()] = out
		return Allgather(ctx, c, input(c.Rank())[:m], out, hier)
	})
	for r := range p {
		for q := range p {
			require.Equal(t, input(q)[:m], results[r][q*m:(q+1)*m], "allgather, rank %d, block %d", r, q)
		}
	}

	runAll(t, comms, func(ctx context.Context, c *Comm) error {
		v := make([]float32, n)
		if c.Rank() == 3 {
			copy(v, input(3))
		}
		results[c.Rank()] = v
		return Broadcast(ctx, c, v, 3, hier)
	})
	for r := range p {
		require.Equal(t, input(3), results[r], "broadcast, rank %d", r)
	}

	outs := make([]*SparseVector[float32], p)
	runAll(t, comms, func(ctx context.Context, c *Comm) error {
		in := SparseVectorFromDense(input(c.Rank()))
		outs[c.Rank()] = &SparseVector[float32]{}
		st, err := SparseAllreduce(ctx, c, in, outs[c.Rank()], Sum, hier)
		if err == nil {
			require.Equal(t, AlgoHierarchical, st.Algo)
		}
		return err
	})
	for r := range p {
		require.Equal(t, want, outs[r].ToDense(nil), "sparse allreduce, rank %d", r)
	}
}
