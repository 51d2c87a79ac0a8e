package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/transport"
)

// requireAllFailedWith checks that every rank failed, each with one of the
// given sentinel errors (a rank that detected the problem reports it, the
// others see the abort it sent them).
func requireAllFailedWith(t *testing.T, errs []error, targets ...error) {
	t.Helper()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		ok := false
		for _, target := range targets {
			ok = ok || errors.Is(err, target)
		}
		require.True(t, ok, "rank %d: unexpected error %v", r, err)
	}
}

func checkReduceScatter[T collectives.Float](t *testing.T, p, m int, red collectives.ReduceOp, seg int, inPlace bool) {
	t.Helper()
	seed := uint64(p*7919 + m*13 + int(red))
	want := denseReduce[T](seed, p, p*m, red)
	results := make([][]T, p)
	inputs := make([][]T, p)
	errs := runDense(t, p, func(op *collectives.Op) error {
		r := op.Rank()
		in := denseInput[T](seed, r, p*m)
		out := make([]T, m)
		if inPlace {
			out = in[r*m : (r+1)*m]
		}
		err := collectives.ReduceScatterSeg(op, in, out, red, collectives.AlgoAuto, seg)
		results[r], inputs[r] = out, in
		return err
	})
	requireNoErrors(t, errs)
	for r := range p {
		require.Equal(t, want[r*m:(r+1)*m], results[r], "rank %d", r)
		if !inPlace {
			require.Equal(t, denseInput[T](seed, r, p*m), inputs[r], "rank %d: in was modified", r)
		}
	}
}

func TestReduceScatter(t *testing.T) {
	for p := 1; p <= 9; p++ {
		t.Run(fmt.Sprintf("P%d", p), func(t *testing.T) {
			for _, m := range []int{0, 1, 5, 37} {
				for _, red := range denseReductions {
					for _, seg := range []int{3, 1 << 16} {
						checkReduceScatter[float32](t, p, m, red, seg, false)
						checkReduceScatter[float64](t, p, m, red, seg, m%2 == 1)
					}
				}
			}
		})
	}
	checkReduceScatter[float32](t, 4, 20_000, collectives.Sum, 1<<12, false)
}

func TestReduceScatterInvalid(t *testing.T) {
	errs := runDense(t, 3, func(op *collectives.Op) error {
		return collectives.ReduceScatter(op, make([]float32, 10), make([]float32, 3), collectives.Sum, collectives.AlgoRing)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
	errs = runDense(t, 3, func(op *collectives.Op) error {
		in := make([]float32, 9)
		return collectives.ReduceScatter(op, in, in[1:4], collectives.Sum, collectives.AlgoRing)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
	errs = runDense(t, 2, func(op *collectives.Op) error {
		return collectives.ReduceScatter(op, make([]float32, 4), make([]float32, 2), collectives.Sum, collectives.AlgoRabenseifner)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
}

// BenchmarkReduceScatter measures the ring reduce-scatter over the
// in-memory transport with 4 ranks, out of place and in place; MB/s counts
// the input vector.
func BenchmarkReduceScatter(b *testing.B) {
	const p = 4
	for _, n := range []int{1 << 16, 1 << 20, 16 << 20} {
		for _, inPlace := range []bool{false, true} {
			b.Run(fmt.Sprintf("n=%s/inplace=%v", benchSize(n), inPlace), func(b *testing.B) {
				m := n / p
				in := make([][]float32, p)
				out := make([][]float32, p)
				for r := range p {
					in[r] = denseInput[float32](1, r, n)
					out[r] = make([]float32, m)
					if inPlace {
						out[r] = in[r][r*m : (r+1)*m]
					}
				}
				benchCollective(b, p, 4*n, func(op *collectives.Op) error {
					r := op.Rank()
					return collectives.ReduceScatter(op, in[r], out[r], collectives.Max, collectives.AlgoRing)
				})
			})
		}
	}
}

// randomCounts returns p seeded per-rank lengths in [0, maxCount], with
// some zeros.
func randomCounts(seed uint64, p, maxCount int) []int {
	rng := rand.New(rand.NewPCG(seed, 99))
	counts := make([]int, p)
	for r := range counts {
		if rng.IntN(4) != 0 {
			counts[r] = rng.IntN(maxCount + 1)
		}
	}
	return counts
}

// allgatherAlgos returns the algorithms Allgather accepts on p ranks
// (AlgoRecursiveDoubling is Bruck's algorithm when p is not a power of two).
func allgatherAlgos(int) []collectives.Algo {
	return []collectives.Algo{collectives.AlgoAuto, collectives.AlgoRing, collectives.AlgoRecursiveDoubling}
}

func checkAllgatherv[T collectives.Float](t *testing.T, p int, counts []int, algo collectives.Algo, seg int, inPlace, equal bool) {
	t.Helper()
	seed := uint64(p*31 + len(counts) + counts[0])
	want := []T{}
	offs := make([]int, p+1)
	for r, c := range counts {
		want = append(want, denseInput[T](seed, r, c)...)
		offs[r+1] = offs[r] + c
	}
	results := make([][]T, p)
	errs := runDense(t, p, func(op *collectives.Op) error {
		r := op.Rank()
		out := make([]T, len(want))
		for i := range out {
			out[i] = -1000 // not a possible input value
		}
		in := denseInput[T](seed, r, counts[r])
		if inPlace {
			copy(out[offs[r]:], in)
			in = out[offs[r]:offs[r+1]]
		}
		results[r] = out
		if equal {
			return collectives.AllgatherSeg(op, in, out, algo, seg)
		}
		return collectives.AllgathervSeg(op, in, out, counts, algo, seg)
	})
	requireNoErrors(t, errs)
	for r := range p {
		require.Equal(t, want, results[r], "%v rank %d", algo, r)
	}
}

func TestAllgather(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, m := range []int{0, 1, 3, 17, 1000} {
			counts := make([]int, p)
			for r := range counts {
				counts[r] = m
			}
			for _, algo := range allgatherAlgos(p) {
				checkAllgatherv[float32](t, p, counts, algo, 97, false, true)
				checkAllgatherv[float64](t, p, counts, algo, 1<<16, m%2 == 1, true)
			}
		}
	}
}

func TestAllgatherv(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for trial := range 6 {
			counts := randomCounts(uint64(p*10+trial), p, 40)
			for _, algo := range allgatherAlgos(p) {
				checkAllgatherv[float32](t, p, counts, algo, 3, trial%2 == 0, false)
				checkAllgatherv[float64](t, p, counts, algo, 1<<16, trial%2 == 1, false)
			}
		}
	}
}

func TestAllgathervInvalid(t *testing.T) {
	for name, counts := range map[string]func(r int) []int{
		"short counts":    func(int) []int { return []int{2, 2} },
		"negative count":  func(int) []int { return []int{2, 2, -1} },
		"count is not in": func(int) []int { return []int{3, 3, 3} },
	} {
		t.Run(name, func(t *testing.T) {
			errs := runDense(t, 3, func(op *collectives.Op) error {
				return collectives.Allgatherv(op, make([]float32, 2), make([]float32, 6), counts(op.Rank()), collectives.AlgoRing)
			})
			requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
		})
	}
	// Counts that differ between ranks but add up to the same total pass
	// every local check and the descriptor check; rank 1 receives a block
	// of the wrong size and fails the operation. Rank 0 and 2 agree with
	// each other and may complete first (their view is consistent), so only
	// rank 1's failure and the absence of a hang are certain.
	errs := runDense(t, 3, func(op *collectives.Op) error {
		counts := []int{2, 2, 2}
		if op.Rank() == 1 {
			counts = []int{1, 2, 3}
		}
		in := make([]float32, counts[op.Rank()])
		return collectives.Allgatherv(op, in, make([]float32, 6), counts, collectives.AlgoRing)
	})
	require.ErrorIs(t, errs[1], transport.ErrMismatch)
	errs = runDense(t, 2, func(op *collectives.Op) error {
		return collectives.Allgather(op, make([]float32, 2), make([]float32, 5), collectives.AlgoRing)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
	errs = runDense(t, 3, func(op *collectives.Op) error {
		return collectives.Allgather(op, make([]float32, 2), make([]float32, 6), collectives.AlgoRabenseifner)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
}

var broadcastAlgos = []collectives.Algo{collectives.AlgoAuto, collectives.AlgoDirect, collectives.AlgoRing}

func TestBroadcast(t *testing.T) {
	for p := 1; p <= 9; p++ {
		// AlgoAuto resolves to one of the other two (TestChooseBroadcast);
		// here it runs once per P, the forced algorithms from every root.
		checkBroadcast[float32](t, p, 3*p, p/2, collectives.AlgoAuto, 7)
		for _, algo := range broadcastAlgos[1:] {
			t.Run(fmt.Sprintf("P%d/%v", p, algo), func(t *testing.T) {
				for root := range p {
					for _, n := range []int{0, 2*p + 3, 1000} {
						checkBroadcast[float32](t, p, n, root, algo, 7)
					}
					checkBroadcast[float64](t, p, 2*p+1, root, algo, 1<<16)
				}
			})
		}
	}
	checkBroadcast[float32](t, 6, 100_000, 4, collectives.AlgoAuto, 1<<16)
}

func checkBroadcast[T collectives.Float](t *testing.T, p, n, root int, algo collectives.Algo, seg int) {
	t.Helper()
	seed := uint64(p*101 + n + root)
	want := denseInput[T](seed, root, n)
	results := make([][]T, p)
	errs := runDense(t, p, func(op *collectives.Op) error {
		data := make([]T, n)
		if op.Rank() == root {
			data = denseInput[T](seed, root, n)
		} else {
			for i := range data {
				data[i] = -1000
			}
		}
		results[op.Rank()] = data
		return collectives.BroadcastSeg(op, data, root, algo, seg)
	})
	requireNoErrors(t, errs)
	for r := range p {
		require.Equal(t, want, results[r], "root %d rank %d", root, r)
	}
}

func TestBroadcastInvalid(t *testing.T) {
	for _, root := range []int{-1, 3} {
		errs := runDense(t, 3, func(op *collectives.Op) error {
			return collectives.Broadcast(op, make([]float32, 4), root, collectives.AlgoAuto)
		})
		requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
	}
	// Ranks disagreeing on the root fail instead of hanging. (With the
	// binomial tree that is only guaranteed when two trees share an edge;
	// scatter-allgather ends with a ring over every rank, so some ring edge
	// always joins two ranks with different roots.)
	errs := runDense(t, 4, func(op *collectives.Op) error {
		return collectives.Broadcast(op, make([]float32, 4), op.Rank()%2, collectives.AlgoRing)
	})
	requireAllFailedWith(t, errs, transport.ErrMismatch, transport.ErrAborted)
	errs = runDense(t, 2, func(op *collectives.Op) error {
		return collectives.Broadcast(op, make([]float32, 4), 0, collectives.AlgoRabenseifner)
	})
	requireAllFailedWith(t, errs, transport.ErrInvalid, transport.ErrAborted)
}

func TestChooseBroadcast(t *testing.T) {
	m := collectives.DefaultCostModel
	require.Equal(t, collectives.AlgoDirect, m.ChooseBroadcast(1<<10, 8))
	require.Equal(t, collectives.AlgoRing, m.ChooseBroadcast(64<<20, 8))
	require.Equal(t, collectives.AlgoDirect, m.ChooseBroadcast(64<<20, 2), "two ranks: one message")
}

// TestBarrier: no rank leaves a barrier before every rank has entered it.
// Ranks enter in a random order with random delays, several times in a row.
func TestBarrier(t *testing.T) {
	for p := 1; p <= 9; p++ {
		const rounds = 4
		var entered [rounds]atomic.Int32
		errs := runDense(t, p, func(op *collectives.Op) error {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(op.Rank())))
			for k := range rounds {
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				entered[k].Add(1)
				op.Seq = uint64(k + 1)
				if err := collectives.Barrier(op); err != nil {
					return err
				}
				if n := entered[k].Load(); n != int32(p) {
					return fmt.Errorf("rank %d left barrier %d when only %d of %d ranks had entered", op.Rank(), k, n, p)
				}
			}
			return nil
		})
		requireNoErrors(t, errs)
	}
}

// TestBarrierMissingRank: a rank that never enters makes the barrier fail
// by the deadline rather than pass or hang.
func TestBarrierMissingRank(t *testing.T) {
	errs := runDense(t, 3, func(op *collectives.Op) error {
		if op.Rank() == 1 {
			return nil
		}
		ctx, cancel := context.WithTimeout(op.Ctx, 200*time.Millisecond)
		defer cancel()
		op.Ctx = ctx
		return collectives.Barrier(op)
	})
	require.NoError(t, errs[1])
	require.Error(t, errs[0])
	require.Error(t, errs[2])
}

// lazySender wraps a transport so that every send reads its buffers a
// little later, from another goroutine, as a TCP or RDMA transport does.
// An algorithm that writes into a buffer before its send has completed then
// corrupts data or trips the race detector, which the in-memory transport
// (it copies synchronously inside Send) would never show.
type lazySender struct {
	transport.Transport
	seed atomic.Uint64
}

func (l *lazySender) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	req := transport.NewRequest(peer, tag, true)
	delay := time.Duration(rand.New(rand.NewPCG(l.seed.Add(1), 7)).IntN(200)) * time.Microsecond
	go func() {
		time.Sleep(delay)
		inner := l.Transport.Send(peer, tag, desc, bufs...)
		<-inner.Done()
		req.Complete(nil, inner.Err())
	}()
	return req
}

// TestDenseLazySends runs every dense collective over lazySender.
func TestDenseLazySends(t *testing.T) {
	for _, p := range []int{2, 3, 4, 5} {
		const n = 203
		seed := uint64(p)
		sum := denseReduce[float32](seed, p, n, collectives.Sum)
		sumRS := denseReduce[float32](seed, p, p*n, collectives.Sum)
		var gathered []float32
		for r := range p {
			gathered = append(gathered, denseInput[float32](seed, r, n)...)
		}
		errs := coltest.Run(t, p, denseTimeout, func(ctx context.Context, tr transport.Transport) error {
			lazy := &lazySender{Transport: tr}
			lazy.seed.Store(uint64(tr.Rank()) << 32)
			r := tr.Rank()
			seq := uint64(0)
			newOp := func() *collectives.Op {
				seq++
				return coltest.NewOp(ctx, lazy, seq, transport.Desc{})
			}
			for _, algo := range allreduceAlgos[1:] {
				data := denseInput[float32](seed, r, n)
				if _, err := collectives.AllreduceSeg(newOp(), data, collectives.Sum, algo, collectives.DefaultCostModel, 5); err != nil {
					return err
				}
				if !assert.Equal(t, sum, data, "allreduce %v rank %d", algo, r) {
					return nil
				}
			}
			out := make([]float32, n)
			if err := collectives.ReduceScatterSeg(newOp(), denseInput[float32](seed, r, p*n), out, collectives.Sum, collectives.AlgoRing, 5); err != nil {
				return err
			}
			assert.Equal(t, sumRS[r*n:(r+1)*n], out, "reduce-scatter rank %d", r)
			all := make([]float32, p*n)
			if err := collectives.AllgatherSeg(newOp(), denseInput[float32](seed, r, n), all, collectives.AlgoRing, 5); err != nil {
				return err
			}
			assert.Equal(t, gathered, all, "allgather rank %d", r)
			all = make([]float32, p*n)
			if err := collectives.AllgatherSeg(newOp(), denseInput[float32](seed, r, n), all, collectives.AlgoRecursiveDoubling, 5); err != nil {
				return err
			}
			assert.Equal(t, gathered, all, "recursive-doubling/bruck allgather rank %d", r)
			for _, algo := range []collectives.Algo{collectives.AlgoDirect, collectives.AlgoRing} {
				data := denseInput[float32](seed, r, n)
				if err := collectives.BroadcastSeg(newOp(), data, p-1, algo, 5); err != nil {
					return err
				}
				assert.Equal(t, denseInput[float32](seed, p-1, n), data, "broadcast %v rank %d", algo, r)
			}
			return collectives.Barrier(newOp())
		})
		requireNoErrors(t, errs)
	}
}

// TestDenseRandomized draws P, lengths, segment sizes, algorithms and
// reductions from a fixed seed, to cover combinations the tables above do
// not (a fold with multi-segment halving rounds, uneven blocks cut into
// segments of odd sizes, ...).
func TestDenseRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	for trial := range 40 {
		p := 2 + rng.IntN(8)
		n := rng.IntN(300)
		seg := 1 + rng.IntN(40)
		algo := allreduceAlgos[rng.IntN(len(allreduceAlgos))]
		red := denseReductions[rng.IntN(len(denseReductions))]
		t.Run(fmt.Sprintf("%d/P%d/n%d/seg%d/%v/%v", trial, p, n, seg, algo, red), func(t *testing.T) {
			checkAllreduce[float32](t, p, n, algo, red, seg)
			checkReduceScatter[float64](t, p, n/p, red, seg, trial%2 == 0)
			counts := randomCounts(uint64(trial), p, 30)
			checkAllgatherv[float32](t, p, counts, allgatherAlgos(p)[rng.IntN(3)], seg, trial%3 == 0, false)
			checkBroadcast[float64](t, p, n, rng.IntN(p), broadcastAlgos[rng.IntN(len(broadcastAlgos))], seg)
		})
	}
}
