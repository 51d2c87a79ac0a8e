package collectives_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// spRunHierarchical is spRun with the ranks on the hosts of hosts.
func spRunHierarchical[T collectives.Float](t testing.TB, hosts []int, in []*sparse.Vector[T], opts collectives.SparseOptions) ([]*sparse.Vector[T], []error) {
	p := len(in)
	outs := make([]*sparse.Vector[T], p)
	errs := coltest.Run(t, p, 20*time.Second, func(ctx context.Context, tr transport.Transport) error {
		r := tr.Rank()
		op := coltest.NewOp(ctx, tr, 7, transport.Desc{})
		op.Topo = &collectives.Topology{Hosts: hosts}
		outs[r] = &sparse.Vector[T]{}
		st, err := collectives.SparseAllreduce(op, in[r], outs[r], opts)
		if err == nil && st.Algo != collectives.AlgoHierarchical {
			return fmt.Errorf("ran %v", st.Algo)
		}
		return err
	})
	return outs, errs
}

// TestHierarchicalSparseAllreduce: every input pattern, on topologies of
// 1-4 hosts of 1-4 ranks numbered by host and dealt round-robin, against
// the locally computed sum; every rank's result bit-identical to rank
// 0's, and Avg equal to the sum divided by P.
func TestHierarchicalSparseAllreduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	dims := []int{0, 1, 7, 64, 1000, 1<<22 + 3}
	for name, hosts := range hostLayouts() {
		t.Run(name, func(t *testing.T) {
			p := len(hosts)
			for _, dim := range dims {
				for _, kind := range spKinds {
					for _, opts := range []collectives.SparseOptions{
						{Algo: collectives.AlgoHierarchical},
						{Algo: collectives.AlgoHierarchical, DenseOut: true, Reduce: collectives.Avg},
					} {
						if opts.DenseOut && dim > 1<<20 {
							continue
						}
						in := spInputs[float32](rng, p, dim, kind)
						outs, errs := spRunHierarchical(t, hosts, in, opts)
						ref := spReference(in)
						if opts.Reduce == collectives.Avg {
							for i := range ref {
								ref[i] /= float32(p)
							}
						}
						for r := range p {
							require.NoError(t, errs[r], "dim %d %s rank %d", dim, kind, r)
							require.NoError(t, spCheckResult(outs[r], ref, dim), "dim %d %s rank %d", dim, kind, r)
							require.True(t, spSameBits(outs[0], outs[r]), "dim %d %s: rank %d differs from rank 0", dim, kind, r)
							if opts.DenseOut {
								require.True(t, outs[r].Dense)
							}
						}
					}
				}
			}
		})
	}
}

// TestHierarchicalSparseAllreduceInvalid: a lossy codec or a topology the
// algorithm cannot use fails on every rank.
func TestHierarchicalSparseAllreduceInvalid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	in := spInputs[float32](rng, 4, 100, "1%")
	for name, c := range map[string]struct {
		hosts []int
		opts  collectives.SparseOptions
	}{
		"uneven-hosts": {[]int{0, 0, 0, 1}, collectives.SparseOptions{Algo: collectives.AlgoHierarchical}},
		"lossy-codec":  {[]int{0, 0, 1, 1}, collectives.SparseOptions{Algo: collectives.AlgoHierarchical, Quant: quant.Q4}},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := spRunHierarchical(t, c.hosts, in, c.opts)
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
			}
		})
	}
}
