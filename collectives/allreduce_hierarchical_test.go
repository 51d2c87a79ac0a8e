package collectives_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// hostLayouts are topologies of H hosts of L ranks: ranks numbered host by
// host, and ranks dealt round-robin over the hosts (rank r on host r%H),
// as a launcher that interleaves hosts would number them.
func hostLayouts() map[string][]int {
	out := map[string][]int{}
	for _, hl := range [][2]int{{2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}, {1, 3}, {3, 1}} {
		h, l := hl[0], hl[1]
		blocked := make([]int, h*l)
		dealt := make([]int, h*l)
		for r := range blocked {
			blocked[r] = r / l
			dealt[r] = r % h
		}
		out[fmt.Sprintf("%dx%d-blocked", h, l)] = blocked
		out[fmt.Sprintf("%dx%d-dealt", h, l)] = dealt
	}
	return out
}

// checkHierarchical runs the hierarchical allreduce on the hosts of hosts
// and compares every rank's result with the local reference.
func checkHierarchical[T collectives.Float](t *testing.T, hosts []int, n int, red collectives.ReduceOp, seg int) {
	t.Helper()
	checkHierarchicalRun(t, hosts, n, red, uint64(len(hosts)*7919+n*13+int(red)), func(op *collectives.Op, data []T) error {
		_, err := collectives.AllreduceSeg(op, data, red, collectives.AlgoHierarchical, collectives.DefaultCostModel, seg)
		return err
	})
}

// checkHierarchicalRun runs run on every rank's seeded input, on the hosts
// of hosts, and compares every rank's result with the local reference.
func checkHierarchicalRun[T collectives.Float](t *testing.T, hosts []int, n int, red collectives.ReduceOp, seed uint64, run func(*collectives.Op, []T) error) {
	t.Helper()
	p := len(hosts)
	want := denseReduce[T](seed, p, n, red)
	results := make([][]T, p)
	errs := runDense(t, p, func(op *collectives.Op) error {
		op.Topo = &collectives.Topology{Hosts: hosts}
		data := denseInput[T](seed, op.Rank(), n)
		results[op.Rank()] = data
		return run(op, data)
	})
	requireNoErrors(t, errs)
	for r := range p {
		require.Equal(t, want, results[r], "rank %d, hosts %v, n %d, %v", r, hosts, n, red)
	}
}

func TestHierarchicalAllreduce(t *testing.T) {
	for name, hosts := range hostLayouts() {
		t.Run(name, func(t *testing.T) {
			for _, n := range denseLengths(len(hosts)) {
				checkHierarchical[float32](t, hosts, n, collectives.Sum, 64)
				checkHierarchical[float64](t, hosts, n, collectives.Sum, 5)
				checkHierarchical[float32](t, hosts, n, collectives.Min, 64)
				checkHierarchical[float64](t, hosts, n, collectives.Max, 64)
				checkHierarchical[float32](t, hosts, n, collectives.Avg, 64)
			}
		})
	}
}

// TestHierarchicalAllreduceDefaultSegments: a vector of several default
// segments per block, so the phases' tags span many steps, and long
// enough (8 MiB) for the default chunking to pipeline it.
func TestHierarchicalAllreduceDefaultSegments(t *testing.T) {
	checkHierarchical[float32](t, []int{0, 1, 0, 1}, 2<<20+17, collectives.Sum, 512<<10/4)
}

// TestHierarchicalAllreduceInvalid: a topology the algorithm cannot use
// fails the operation on every rank with the reason, and no rank hangs.
func TestHierarchicalAllreduceInvalid(t *testing.T) {
	for name, hosts := range map[string][]int{
		"none":          nil,
		"uneven":        {0, 0, 0, 1},
		"wrong-length":  {0, 1},
		"unused-host":   {0, 0, 2, 2},
		"negative-host": {0, -1, 0, -1},
	} {
		t.Run(name, func(t *testing.T) {
			errs := runDense(t, 4, func(op *collectives.Op) error {
				if hosts != nil {
					op.Topo = &collectives.Topology{Hosts: hosts}
				}
				data := denseInput[float32](1, op.Rank(), 100)
				_, err := collectives.AllreduceSeg(op, data, collectives.Sum, collectives.AlgoHierarchical, collectives.DefaultCostModel, 64)
				return err
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
			}
		})
	}
}

// TestChooseHierarchical: with a local link much faster than the network,
// auto takes the hierarchical allreduce for large vectors on two levels and
// the flat algorithms for one level or without the local figures; every
// choice still computes the reference.
func TestChooseHierarchical(t *testing.T) {
	network := collectives.CostModel{Alpha: 50e-6, Beta: 1 / 125e6, Gamma: 1 / 4e9}
	twoLevel := network
	twoLevel.LocalAlpha, twoLevel.LocalBeta = 2e-6, 1/10e9
	cases := []struct {
		name  string
		model collectives.CostModel
		hosts []int
		n     int
		hier  bool
	}{
		{"two-levels-large", twoLevel, []int{0, 0, 1, 1}, 1 << 16, true},
		{"no-local-figures", network, []int{0, 0, 1, 1}, 1 << 16, false},
		{"one-host", twoLevel, []int{0, 0, 0, 0}, 1 << 16, false},
		{"one-rank-per-host", twoLevel, []int{0, 1, 2, 3}, 1 << 16, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := len(c.hosts)
			want := denseReduce[float32](3, p, c.n, collectives.Sum)
			used := make([]collectives.Algo, p)
			results := make([][]float32, p)
			errs := runDense(t, p, func(op *collectives.Op) error {
				op.Topo = &collectives.Topology{Hosts: c.hosts}
				data := denseInput[float32](3, op.Rank(), c.n)
				results[op.Rank()] = data
				a, err := collectives.AllreduceSeg(op, data, collectives.Sum, collectives.AlgoAuto, c.model, 64<<10)
				used[op.Rank()] = a
				return err
			})
			requireNoErrors(t, errs)
			for r := range p {
				require.Equal(t, want, results[r], "rank %d", r)
				require.Equal(t, used[0], used[r], "rank %d chose another algorithm", r)
			}
			require.Equal(t, c.hier, used[0] == collectives.AlgoHierarchical, "chose %v", used[0])
		})
	}
}

// checkHierarchicalChunks is checkHierarchical with the vector pipelined
// over chunks chunks.
func checkHierarchicalChunks[T collectives.Float](t *testing.T, hosts []int, n int, red collectives.ReduceOp, seg, chunks int) {
	t.Helper()
	seed := uint64(len(hosts)*7919 + n*13 + int(red) + chunks*101)
	checkHierarchicalRun(t, hosts, n, red, seed, func(op *collectives.Op, data []T) error {
		return collectives.HierarchicalAllreduceChunks(op, data, red, seg, chunks)
	})
}

// TestHierarchicalAllreducePipelined: the chunked schedule against the
// reference, with lengths not divisible by the chunk count, chunks shorter
// than a host's ranks (empty blocks), more chunks than elements, and one
// segment or several per block.
func TestHierarchicalAllreducePipelined(t *testing.T) {
	layouts := hostLayouts()
	for _, name := range []string{"2x4-blocked", "2x3-dealt", "4x2-blocked", "3x2-dealt", "1x3-blocked", "3x1-blocked"} {
		hosts := layouts[name]
		t.Run(name, func(t *testing.T) {
			for _, chunks := range []int{2, 3, 7, collectives.MaxHierarchicalChunks} {
				for _, n := range []int{1, 5, chunks*2 + 1, 257, 1031} {
					checkHierarchicalChunks[float32](t, hosts, n, collectives.Sum, 64, chunks)
					checkHierarchicalChunks[float64](t, hosts, n, collectives.Sum, 5, chunks)
					checkHierarchicalChunks[float32](t, hosts, n, collectives.Avg, 7, chunks)
					checkHierarchicalChunks[float32](t, hosts, n, collectives.Min, 64, chunks)
					checkHierarchicalChunks[float64](t, hosts, n, collectives.Max, 3, chunks)
				}
			}
		})
	}
}

// TestHierarchicalAllreduceChunkCount: a chunk count outside 1..max fails
// the operation on every rank, and no rank hangs.
func TestHierarchicalAllreduceChunkCount(t *testing.T) {
	for _, chunks := range []int{0, collectives.MaxHierarchicalChunks + 1} {
		errs := runDense(t, 4, func(op *collectives.Op) error {
			op.Topo = &collectives.Topology{Hosts: []int{0, 0, 1, 1}}
			return collectives.HierarchicalAllreduceChunks(op, denseInput[float32](1, op.Rank(), 100), collectives.Sum, 64, chunks)
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d, %d chunks", r, chunks)
		}
	}
}

// TestHierarchicalErrorsNameCommRanks: ranks that cut the vector into
// different chunks meet messages of the wrong size in the middle of the
// pipeline; the operation fails on every rank and none hangs. The error,
// met inside a phase that runs a flat algorithm on a group of ranks
// numbered from 0, names the ranks of the communicator: each rank as
// itself, and the sender of a wrong-sized message as one of ranks 4-6
// (rank 5, whose chunks disagree, or a neighbour of it on host 1), not by
// its index within the host.
var sentByHost1 = regexp.MustCompile(`rank [456] sent`)

func TestHierarchicalErrorsNameCommRanks(t *testing.T) {
	errs := runDense(t, 8, func(op *collectives.Op) error {
		op.Topo = &collectives.Topology{Hosts: []int{0, 0, 0, 0, 1, 1, 1, 1}}
		chunks := 3
		if op.Rank() == 5 {
			chunks = 4
		}
		return collectives.HierarchicalAllreduceChunks(op, denseInput[float32](1, op.Rank(), 1000), collectives.Sum, 16, chunks)
	})
	blamed := false
	for r, err := range errs {
		var te *transport.Error
		require.ErrorAs(t, err, &te, "rank %d", r)
		assert.Equal(t, r, te.Rank, "rank %d's error: %v", r, err)
		blamed = blamed || sentByHost1.MatchString(err.Error())
	}
	assert.True(t, blamed, "some rank must blame rank 4, 5 or 6 for a wrong size: %v", errs)
}
