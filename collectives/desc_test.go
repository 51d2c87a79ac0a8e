package collectives_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
	"github.com/stretchr/testify/require"
)

func TestDescString(t *testing.T) {
	for want, d := range map[string]transport.Desc{
		"allreduce(dtype=float32 reduce=sum algo=ring count=1024)": {Kind: transport.OpAllreduce, DType: uint8(collectives.Float32),
			Algo: uint8(collectives.AlgoRing), Count: 1024},
		"reduce-scatter(dtype=float64 reduce=max algo=auto count=0)": {Kind: transport.OpReduceScatter, DType: uint8(collectives.Float64),
			Reduce: uint8(collectives.Max)},
		"broadcast(dtype=float32 algo=direct root=0 count=3)": {Kind: transport.OpBroadcast, DType: uint8(collectives.Float32),
			Algo: uint8(collectives.AlgoDirect), Count: 3},
		"barrier(algo=direct)": {Kind: transport.OpBarrier, Algo: uint8(collectives.AlgoDirect)},
		// A field a kind does not use is still shown when set.
		"barrier(reduce=min algo=direct)": {Kind: transport.OpBarrier, Reduce: uint8(collectives.Min), Algo: uint8(collectives.AlgoDirect)},
		"sparse-allreduce(dtype=float32 reduce=avg algo=dsar dim=100 codec=none)": {Kind: transport.OpSparseAllreduce, DType: uint8(collectives.Float32),
			Reduce: uint8(collectives.Avg), Algo: uint8(collectives.AlgoDSAR), Count: 100},
		"sparse-allgather(dtype=float32 algo=direct dim=7 codec=q4)": {Kind: transport.OpSparseAllgather, DType: uint8(collectives.Float32),
			Algo: uint8(collectives.AlgoDirect), Count: 7, Param: uint64(quant.Q4)},
		"p2p(dtype=float64 count=5)": {Kind: transport.OpP2P, DType: uint8(collectives.Float64), Count: 5},
		// Unknown values print as numbers.
		"allreduce(dtype=dtype(9) reduce=reduce(200) algo=algo(99) count=1)": {Kind: transport.OpAllreduce, DType: 9, Reduce: 200, Algo: 99, Count: 1},
	} {
		require.Equal(t, want, collectives.DescString(d))
	}
}

// TestMismatchNamesEnums: ranks that call different collectives at one
// sequence number fail on every rank, and the error names both calls with
// the enums' names.
func TestMismatchNamesEnums(t *testing.T) {
	errs := runDense(t, 2, func(op *collectives.Op) error {
		if op.Rank() == 1 {
			_, err := collectives.Allreduce(op, make([]float32, 1000), collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
			return err
		}
		return collectives.Barrier(op)
	})
	allreduce := "allreduce(dtype=float32 reduce=sum algo=ring count=1000)"
	barrier := "barrier(algo=direct)"
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.True(t, errors.Is(err, transport.ErrMismatch) || errors.Is(err, transport.ErrAborted), "rank %d: %v", r, err)
		msg := err.Error()
		require.True(t, strings.Contains(msg, "rank 1 called "+allreduce+" but rank 0 called "+barrier) ||
			strings.Contains(msg, "rank 0 called "+barrier+" but rank 1 called "+allreduce), "rank %d: %v", r, err)
		var me *transport.MismatchError
		if errors.Is(err, transport.ErrMismatch) {
			require.True(t, errors.As(err, &me), "rank %d: the transport's MismatchError is still in %v", r, err)
		}
	}
}

// TestSparseDenseEndKeepsKind: a sparse allreduce that ends with the dense
// allreduce runs as one operation of kind sparse allreduce on every rank,
// and a rank that calls the plain dense allreduce at the same sequence
// number meets a mismatch.
func TestSparseDenseEndKeepsKind(t *testing.T) {
	const dim = 64
	in := func(r int) *sparse.Vector[float32] {
		v := make([]float32, dim)
		for i := range v {
			v[i] = float32(r*dim + i)
		}
		return sparse.FromDense(v)
	}
	errs := runDense(t, 3, func(op *collectives.Op) error {
		out := &sparse.Vector[float32]{}
		_, err := collectives.SparseAllreduce(op, in(op.Rank()), out, collectives.SparseOptions{Algo: collectives.AlgoRing})
		if err != nil {
			return err
		}
		if op.Desc.Kind != transport.OpSparseAllreduce {
			return errors.New("the dense end changed the descriptor's kind to " + op.Desc.Kind.String())
		}
		for i := range dim {
			if want := float32(3*i + dim*(0+1+2)); out.Values[i] != want {
				return errors.New("wrong sum")
			}
		}
		return nil
	})
	requireNoErrors(t, errs)
	errs = runDense(t, 2, func(op *collectives.Op) error {
		if op.Rank() == 0 {
			_, err := collectives.Allreduce(op, make([]float32, dim), collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
			return err
		}
		_, err := collectives.SparseAllreduce(op, in(1), &sparse.Vector[float32]{}, collectives.SparseOptions{Algo: collectives.AlgoRing})
		return err
	})
	for r, err := range errs {
		require.True(t, errors.Is(err, transport.ErrMismatch) || errors.Is(err, transport.ErrAborted), "rank %d: %v", r, err)
	}
}
