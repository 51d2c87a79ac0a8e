package sparcml

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseNamesRoundTrip(t *testing.T) {
	for _, a := range []Algo{AlgoAuto, AlgoRing, AlgoRabenseifner, AlgoRecursiveDoubling, AlgoSSARSplitAllgather, AlgoDSAR, AlgoDirect} {
		got, err := ParseAlgo(a.String())
		require.NoError(t, err)
		require.Equal(t, a, got)
	}
	for _, r := range []ReduceOp{Sum, Avg, Min, Max} {
		got, err := ParseReduceOp(r.String())
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	for _, q := range []Quant{QuantNone, QuantFP16, QuantBF16, QuantQ8, QuantQ4, QuantQ2} {
		got, err := ParseQuant(q.String())
		require.NoError(t, err)
		require.Equal(t, q, got)
	}
	for _, bad := range []func() error{
		func() error { _, err := ParseAlgo("rings"); return err },
		func() error { _, err := ParseReduceOp("prod"); return err },
		func() error { _, err := ParseQuant("q3"); return err },
	} {
		require.Error(t, bad())
	}
}
