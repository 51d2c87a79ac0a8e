package collectives_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
)

// runOnHosts is runDense with the ranks on the hosts of hosts.
func runOnHosts(t *testing.T, hosts []int, fn func(op *collectives.Op) error) {
	t.Helper()
	errs := runDense(t, len(hosts), func(op *collectives.Op) error {
		op.Topo = &collectives.Topology{Hosts: hosts}
		return fn(op)
	})
	requireNoErrors(t, errs)
}

// TestHierarchicalReduceScatter: every rank's block against the locally
// computed reduction, in place and not, the input untouched when not in
// place.
func TestHierarchicalReduceScatter(t *testing.T) {
	for name, hosts := range hostLayouts() {
		t.Run(name, func(t *testing.T) {
			p := len(hosts)
			for _, m := range []int{0, 1, 3, 100, 1000} {
				for _, red := range denseReductions {
					for _, inPlace := range []bool{false, true} {
						seed := uint64(p*31 + m*7 + int(red))
						want := denseReduce[float32](seed, p, p*m, red)
						results, inputs := make([][]float32, p), make([][]float32, p)
						runOnHosts(t, hosts, func(op *collectives.Op) error {
							r := op.Rank()
							in := denseInput[float32](seed, r, p*m)
							out := make([]float32, m)
							if inPlace {
								out = in[r*m : (r+1)*m]
							}
							results[r], inputs[r] = out, in
							return collectives.ReduceScatterSeg(op, in, out, red, collectives.AlgoHierarchical, 64)
						})
						for r := range p {
							require.Equal(t, want[r*m:(r+1)*m], results[r], "m %d %v in place %v rank %d", m, red, inPlace, r)
							if !inPlace {
								require.Equal(t, denseInput[float32](seed, r, p*m), inputs[r], "rank %d: in was modified", r)
							}
						}
					}
				}
			}
		})
	}
}

// TestHierarchicalAllgather: every rank's output holds every rank's input
// in rank order, in place and not.
func TestHierarchicalAllgather(t *testing.T) {
	for name, hosts := range hostLayouts() {
		t.Run(name, func(t *testing.T) {
			p := len(hosts)
			for _, m := range []int{0, 1, 5, 1000, 3000} {
				for _, inPlace := range []bool{false, true} {
					seed := uint64(p*13 + m)
					want := []float64{}
					for r := range p {
						want = append(want, denseInput[float64](seed, r, m)...)
					}
					results := make([][]float64, p)
					runOnHosts(t, hosts, func(op *collectives.Op) error {
						r := op.Rank()
						out := make([]float64, p*m)
						in := denseInput[float64](seed, r, m)
						if inPlace {
							copy(out[r*m:], in)
							in = out[r*m : (r+1)*m]
						}
						results[r] = out
						return collectives.AllgatherSeg(op, in, out, collectives.AlgoHierarchical, 64)
					})
					for r := range p {
						require.Equal(t, want, results[r], "m %d in place %v rank %d", m, inPlace, r)
					}
				}
			}
		})
	}
}

// TestHierarchicalBroadcast: from every root, every rank ends with the
// root's data.
func TestHierarchicalBroadcast(t *testing.T) {
	for name, hosts := range hostLayouts() {
		t.Run(name, func(t *testing.T) {
			p := len(hosts)
			for _, n := range []int{0, 1, 100, 5000} {
				for root := range p {
					seed := uint64(p*101 + n + root)
					want := denseInput[float32](seed, root, n)
					results := make([][]float32, p)
					runOnHosts(t, hosts, func(op *collectives.Op) error {
						data := make([]float32, n)
						if op.Rank() == root {
							data = denseInput[float32](seed, root, n)
						} else {
							for i := range data {
								data[i] = -1000
							}
						}
						results[op.Rank()] = data
						return collectives.BroadcastSeg(op, data, root, collectives.AlgoHierarchical, 64)
					})
					for r := range p {
						require.Equal(t, want, results[r], "n %d root %d rank %d", n, root, r)
					}
				}
			}
		})
	}
}
