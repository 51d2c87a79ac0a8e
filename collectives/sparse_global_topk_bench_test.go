package collectives_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// BenchmarkGlobalTopkVsUnion: the bytes a rank sends to reduce P local
// top-1% selections of n = 256K (uniformly spread, normal values) with the
// union (SparseAllreduce, AlgoAuto) and with the global top-k (GlobalTopk,
// K = 1% of n, its state kept across iterations: an exact call every
// DefaultGlobalTopkPeriod), on P in-memory ranks. "sent-B/rank" is the
// busiest rank's bytes per operation, "kept" the result's entries and
// "bound-B/rank" Ok-Topk's 6K(P-1)/P entries of index and value.
//
//	go test -run '^$' -bench GlobalTopkVsUnion -benchtime 16x ./collectives/
//
// (P = 256's union, dense, takes about a minute an iteration on 2 cores;
// -bench 'GlobalTopkVsUnion/P=(8|64)/' leaves it out.)
func BenchmarkGlobalTopkVsUnion(b *testing.B) {
	const n = 256 << 10
	const k = n / 100
	for _, p := range []int{8, 64, 256} {
		rng := rand.New(rand.NewPCG(uint64(p), 1))
		in := make([]*sparse.Vector[float32], p)
		for r := range in {
			idx := rng.Perm(n)[:k]
			slices.Sort(idx)
			v := &sparse.Vector[float32]{Dim: n}
			for _, i := range idx {
				v.Indices, v.Values = append(v.Indices, uint32(i)), append(v.Values, float32(rng.NormFloat64()))
			}
			in[r] = v
		}
		for _, scope := range []string{"union", "global"} {
			b.Run(fmt.Sprintf("P=%d/%s", p, scope), func(b *testing.B) {
				gtkBench(b, in, k, scope == "global")
			})
		}
	}
}

func gtkBench(b *testing.B, in []*sparse.Vector[float32], k int, global bool) {
	p := len(in)
	ts := transport.NewInMemory(p)
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	pools, outs, dropped := make([]*collectives.Buffers, p), make([]*sparse.Vector[float32], p), make([]*sparse.Vector[float32], p)
	states := make([]collectives.GlobalTopkState, p)
	for r := range p {
		pools[r], outs[r], dropped[r] = &collectives.Buffers{}, &sparse.Vector[float32]{}, &sparse.Vector[float32]{}
	}
	kept := 0
	run := func(seq uint64) {
		var wg sync.WaitGroup
		errs := make([]error, p)
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := &collectives.Op{Ctx: context.Background(), T: ts[r], Comm: 1, Seq: seq, Pool: pools[r]}
				if global {
					_, errs[r] = collectives.GlobalTopk(op, in[r], outs[r], dropped[r], &states[r], collectives.GlobalTopkOptions{K: k, Reduce: collectives.Avg})
				} else {
					_, errs[r] = collectives.SparseAllreduce(op, in[r], outs[r], collectives.SparseOptions{Reduce: collectives.Avg})
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
		kept += outs[0].NNZ()
	}
	run(1)
	kept = 0
	before := make([]transport.Stats, p)
	for r, t := range ts {
		before[r] = t.Stats()
	}
	seq := uint64(2)
	for b.Loop() {
		run(seq)
		seq++
	}
	b.StopTimer()
	ops := float64(seq - 2)
	var sent float64
	for r, t := range ts {
		sent = max(sent, float64(t.Stats().Sub(before[r]).BytesSent)/ops)
	}
	b.ReportMetric(sent, "sent-B/rank")
	b.ReportMetric(float64(kept)/ops, "kept")
	b.ReportMetric(6*float64(k)*float64(p-1)/float64(p)*8, "bound-B/rank")
}
