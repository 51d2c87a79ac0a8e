package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/collectives/coltest"
	"github.com/sparcml/sparcml/transport"
)

// denseTimeout bounds every multi-rank test run: a hang is a bug.
const denseTimeout = 20 * time.Second

// denseInput returns rank's seeded input of n elements. Values are small
// integers, so sums over at most a few dozen ranks are exact in float32 and
// float64 whatever the order of additions: results can be compared exactly.
func denseInput[T collectives.Float](seed uint64, rank, n int) []T {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	out := make([]T, n)
	for i := range out {
		out[i] = T(rng.IntN(201) - 100)
	}
	return out
}

// denseReduce returns the element-wise reduction of every rank's input,
// computed locally: for Avg the exact sum divided by p.
func denseReduce[T collectives.Float](seed uint64, p, n int, red collectives.ReduceOp) []T {
	want := denseInput[T](seed, 0, n)
	for r := 1; r < p; r++ {
		in := denseInput[T](seed, r, n)
		for i := range want {
			switch red {
			case collectives.Sum, collectives.Avg:
				want[i] += in[i]
			case collectives.Min:
				want[i] = min(want[i], in[i])
			case collectives.Max:
				want[i] = max(want[i], in[i])
			}
		}
	}
	if red == collectives.Avg {
		for i := range want {
			want[i] /= T(p)
		}
	}
	return want
}

// runDense runs fn on p in-memory ranks, each with an Op at sequence 1.
func runDense(t testing.TB, p int, fn func(op *collectives.Op) error) []error {
	t.Helper()
	return coltest.Run(t, p, denseTimeout, func(ctx context.Context, tr transport.Transport) error {
		return fn(coltest.NewOp(ctx, tr, 1, transport.Desc{}))
	})
}

func requireNoErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// denseLengths are the vector lengths tried for p ranks: empty, shorter
// than p, around p, odd, and a few segments long.
func denseLengths(p int) []int {
	return []int{0, 1, max(p-1, 1), p, p + 1, 2*p + 3, 257, 1031}
}

var allreduceAlgos = []collectives.Algo{
	collectives.AlgoAuto, collectives.AlgoRing, collectives.AlgoRabenseifner, collectives.AlgoRecursiveDoubling,
}

var denseReductions = []collectives.ReduceOp{collectives.Sum, collectives.Min, collectives.Max, collectives.Avg}

// checkAllreduce runs one allreduce on p ranks (segments of seg elements)
// and compares every rank's result with the local reference.
func checkAllreduce[T collectives.Float](t *testing.T, p, n int, algo collectives.Algo, red collectives.ReduceOp, seg int) {
	t.Helper()
	seed := uint64(p*1_000_003 + n*31 + int(algo)*7 + int(red))
	want := denseReduce[T](seed, p, n, red)
	results := make([][]T, p)
	used := make([]collectives.Algo, p)
	errs := runDense(t, p, func(op *collectives.Op) error {
		data := denseInput[T](seed, op.Rank(), n)
		a, err := collectives.AllreduceSeg(op, data, red, algo, collectives.DefaultCostModel, seg)
		results[op.Rank()], used[op.Rank()] = data, a
		return err
	})
	requireNoErrors(t, errs)
	for r := range p {
		require.Equal(t, want, results[r], "rank %d", r)
		require.Equal(t, used[0], used[r], "rank %d chose another algorithm", r)
	}
	if algo != collectives.AlgoAuto {
		require.Equal(t, algo, used[0])
	}
}

func TestAllreduce(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, algo := range allreduceAlgos {
			t.Run(fmt.Sprintf("P%d/%v", p, algo), func(t *testing.T) {
				for _, n := range denseLengths(p) {
					// Segments of 64 elements: the longer vectors take
					// several segments per block, as 16M-element ones do
					// with the default segment size. Sum in both types;
					// Min and Max, whose kernels share Sum's structure,
					// and Avg, which is Sum and a division, in one type
					// each.
					checkAllreduce[float32](t, p, n, algo, collectives.Sum, 64)
					checkAllreduce[float64](t, p, n, algo, collectives.Sum, 64)
					checkAllreduce[float32](t, p, n, algo, collectives.Min, 64)
					checkAllreduce[float64](t, p, n, algo, collectives.Max, 64)
					checkAllreduce[float32](t, p, n, algo, collectives.Avg, 64)
				}
			})
		}
	}
}

// TestAllreduceTinySegments cuts vectors into 1- and 3-element segments,
// so the pipelines run many items deep and blocks of different sizes have
// different segment sizes.
func TestAllreduceTinySegments(t *testing.T) {
	for _, p := range []int{2, 3, 5, 8} {
		for _, algo := range allreduceAlgos[1:] {
			for _, seg := range []int{1, 3} {
				checkAllreduce[float32](t, p, 37, algo, collectives.Sum, seg)
				checkAllreduce[float64](t, p, 4*p+1, algo, collectives.Max, seg)
			}
		}
	}
}

// TestAllreduceLarge runs ~100k-element vectors with 64k-element segments
// (several per block), on a power of two and on a folded P.
func TestAllreduceLarge(t *testing.T) {
	for _, algo := range allreduceAlgos[1:] {
		t.Run(algo.String(), func(t *testing.T) {
			checkAllreduce[float32](t, 3, 100_003, algo, collectives.Sum, 16<<10)
			checkAllreduce[float64](t, 4, 30_001, algo, collectives.Min, 4<<10)
		})
	}
}

// TestAllreducePublicSegments goes through the exported entry point with
// the default segment size; 140k float64 on 2 ranks are blocks of 560 KB,
// more than one 512 KiB segment.
func TestAllreducePublicSegments(t *testing.T) {
	const p, n = 2, 140_000
	seed := uint64(42)
	want := denseReduce[float64](seed, p, n, collectives.Sum)
	for _, algo := range allreduceAlgos[1:] {
		results := make([][]float64, p)
		errs := runDense(t, p, func(op *collectives.Op) error {
			data := denseInput[float64](seed, op.Rank(), n)
			results[op.Rank()] = data
			_, err := collectives.Allreduce(op, data, collectives.Sum, algo, collectives.DefaultCostModel)
			return err
		})
		requireNoErrors(t, errs)
		for r := range p {
			require.Equal(t, want, results[r], "%v rank %d", algo, r)
		}
	}
}

// TestAllreduceBytesSent checks the cost model's exact byte predictions
// against the transport's counters, rank by rank.
func TestAllreduceBytesSent(t *testing.T) {
	for _, p := range []int{2, 3, 5, 6, 8} {
		for _, algo := range allreduceAlgos[1:] {
			for _, n := range []int{0, 1, p - 1, 1001} {
				sent := make([]int64, p)
				errs := runDense(t, p, func(op *collectives.Op) error {
					data := denseInput[float32](1, op.Rank(), n)
					before := op.T.Stats()
					_, err := collectives.AllreduceSeg(op, data, collectives.Sum, algo, collectives.DefaultCostModel, 16)
					sent[op.Rank()] = int64(op.T.Stats().Sub(before).BytesSent)
					return err
				})
				requireNoErrors(t, errs)
				var most int64
				for r := range p {
					want := collectives.AllreduceBytesSent(algo, n, 4, p, r)
					require.Equal(t, want, sent[r], "P%d %v n=%d rank %d", p, algo, n, r)
					most = max(most, want)
				}
				_, predicted := collectives.DefaultCostModel.PredictAllreduce(algo, 4*n, p)
				// PredictAllreduce splits bytes, not 4-byte elements, so a
				// block boundary may move by up to 3 bytes per block sent.
				require.InDelta(t, float64(most), float64(predicted), float64(8*p), "P%d %v n=%d", p, algo, n)
			}
		}
	}
}

func TestChooseAllreduce(t *testing.T) {
	m := collectives.DefaultCostModel
	assert.Equal(t, collectives.AlgoRecursiveDoubling, m.ChooseAllreduce(64, 8), "small vectors: fewest rounds")
	assert.Equal(t, collectives.AlgoRabenseifner, m.ChooseAllreduce(64<<20, 8), "large, power of two")
	assert.Equal(t, collectives.AlgoRing, m.ChooseAllreduce(64<<20, 7), "large, folding would double the traffic")
	for _, p := range []int{2, 3, 5, 8, 64, 100} {
		for _, bytes := range []int{0, 1, 1 << 10, 1 << 16, 1 << 20, 1 << 26} {
			a := m.ChooseAllreduce(bytes, p)
			best, _ := m.PredictAllreduce(a, bytes, p)
			for _, other := range allreduceAlgos[1:] {
				t2, _ := m.PredictAllreduce(other, bytes, p)
				assert.LessOrEqual(t, best, t2, "P%d %d bytes: %v predicted slower than %v", p, bytes, a, other)
			}
		}
	}
	ring, _ := m.PredictAllreduce(collectives.AlgoRing, 1<<20, 4)
	want := 6*m.Alpha + 1.5*(1<<20)*m.Beta + 0.75*(1<<20)*m.Gamma
	assert.InDelta(t, want, ring, want*1e-12)
}

// TestAllreduceInvalid: bad arguments fail on every rank, no panic, no hang.
func TestAllreduceInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		red  collectives.ReduceOp
		algo collectives.Algo
	}{
		{"unknown reduction", collectives.ReduceOp(9), collectives.AlgoRing},
		{"sparse algorithm", collectives.Sum, collectives.AlgoDSAR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := runDense(t, 3, func(op *collectives.Op) error {
				_, err := collectives.Allreduce(op, make([]float32, 10), tc.red, tc.algo, collectives.DefaultCostModel)
				return err
			})
			for r, err := range errs {
				require.ErrorIs(t, err, transport.ErrInvalid, "rank %d", r)
			}
		})
	}
	_, err := collectives.Allreduce[float32](nil, nil, collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
	require.ErrorIs(t, err, transport.ErrInvalid)
}

// requireAllFailed checks that every rank returned a mismatch or an abort
// caused by a peer's mismatch.
func requireAllFailed(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		if !errors.Is(err, transport.ErrMismatch) && !errors.Is(err, transport.ErrAborted) {
			t.Fatalf("rank %d: want a mismatch or abort, got %v", r, err)
		}
	}
}

func TestAllreduceLengthMismatch(t *testing.T) {
	for _, algo := range allreduceAlgos[1:] {
		errs := runDense(t, 4, func(op *collectives.Op) error {
			n := 100
			if op.Rank() == 2 {
				n = 101
			}
			_, err := collectives.Allreduce(op, make([]float32, n), collectives.Sum, algo, collectives.DefaultCostModel)
			return err
		})
		requireAllFailed(t, errs)
	}
}

func TestAllreduceVersusBroadcast(t *testing.T) {
	for _, p := range []int{2, 4, 5} {
		for _, algo := range allreduceAlgos {
			for _, bcast := range []collectives.Algo{collectives.AlgoDirect, collectives.AlgoRing} {
				errs := runDense(t, p, func(op *collectives.Op) error {
					data := make([]float32, 1000)
					if op.Rank() == 0 {
						_, err := collectives.Allreduce(op, data, collectives.Sum, algo, collectives.DefaultCostModel)
						return err
					}
					return collectives.Broadcast(op, data, 0, bcast)
				})
				requireAllFailed(t, errs)
			}
		}
	}
}

// TestAllreduceMissingRank: rank 2 never calls. Rank 3, which receives
// from it in the ring, gives up first (shorter deadline) and its error
// names rank 2; it fails the operation on the others, whose errors carry
// that reason, long before their own deadline.
func TestAllreduceMissingRank(t *testing.T) {
	const p, missing, neighbour = 4, 2, 3
	const short, long = 300 * time.Millisecond, 10 * time.Second
	var elapsed [p]time.Duration
	errs := coltest.Run(t, p, denseTimeout, func(ctx context.Context, tr transport.Transport) error {
		if tr.Rank() == missing {
			return nil
		}
		deadline := long
		if tr.Rank() == neighbour {
			deadline = short
		}
		ctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		op := coltest.NewOp(ctx, tr, 1, transport.Desc{})
		_, err := collectives.Allreduce(op, make([]float32, 100), collectives.Sum, collectives.AlgoRing, collectives.DefaultCostModel)
		elapsed[tr.Rank()] = time.Since(start)
		return err
	})
	for r, err := range errs {
		if r == missing {
			continue
		}
		require.Error(t, err, "rank %d", r)
		require.Less(t, elapsed[r], short+2*time.Second, "rank %d", r)
		require.Contains(t, err.Error(), fmt.Sprintf("recv from rank %d", missing), "rank %d", r)
	}
	require.ErrorIs(t, errs[neighbour], context.DeadlineExceeded)
	require.ErrorIs(t, errs[0], transport.ErrAborted)
}

// TestAllreduceConcurrentOps runs two allreduces (different sequence
// numbers, different data) at once over the same transports.
func TestAllreduceConcurrentOps(t *testing.T) {
	const p, n = 5, 3000
	want1 := denseReduce[float32](11, p, n, collectives.Sum)
	want2 := denseReduce[float32](12, p, n, collectives.Max)
	var failures atomic.Int32
	errs := coltest.Run(t, p, denseTimeout, func(ctx context.Context, tr transport.Transport) error {
		errc := make(chan error, 2)
		run := func(seq uint64, seed uint64, red collectives.ReduceOp, want []float32) {
			op := coltest.NewOp(ctx, tr, seq, transport.Desc{})
			data := denseInput[float32](seed, tr.Rank(), n)
			_, err := collectives.AllreduceSeg(op, data, red, collectives.AlgoRing, collectives.DefaultCostModel, 100)
			if err == nil && !assert.Equal(t, want, data) {
				failures.Add(1)
			}
			errc <- err
		}
		go run(1, 11, collectives.Sum, want1)
		go run(2, 12, collectives.Max, want2)
		return errors.Join(<-errc, <-errc)
	})
	requireNoErrors(t, errs)
	require.Zero(t, failures.Load())
}

func TestReduceInto(t *testing.T) {
	dst := []float64{1, 5, -3, 0, 7}
	require.True(t, collectives.ReduceInto(collectives.Max, dst, []float64{2, 4, -1, 0, 8}))
	require.Equal(t, []float64{2, 5, -1, 0, 8}, dst)
	require.True(t, collectives.ReduceInto(collectives.Min, dst, []float64{3, 3, 3, 3, 3}))
	require.Equal(t, []float64{2, 3, -1, 0, 3}, dst)
	require.True(t, collectives.ReduceInto(collectives.Sum, dst, []float64{1, 1, 1}), "shorter src")
	require.Equal(t, []float64{3, 4, 0, 0, 3}, dst)
	require.True(t, collectives.ReduceInto(collectives.Avg, dst, []float64{1, 2, 3, 4, 5}), "avg combines as a sum")
	require.Equal(t, []float64{4, 6, 3, 4, 8}, dst)
	require.False(t, collectives.ReduceInto(collectives.ReduceOp(7), dst, dst))
	require.Equal(t, []float64{4, 6, 3, 4, 8}, dst, "an unknown reduction leaves dst untouched")
}

// BenchmarkAllreduce measures each algorithm over the in-memory transport
// with 4 ranks; b.SetBytes is the vector size, so MB/s is the algorithm
// bandwidth (bus bandwidth is 2(P-1)/P = 1.5 times it).
func BenchmarkAllreduce(b *testing.B) {
	const p = 4
	for _, n := range []int{1 << 10, 1 << 16, 1 << 20, 16 << 20} {
		for _, algo := range allreduceAlgos[1:] {
			name := fmt.Sprintf("n=%s/%v", benchSize(n), algo)
			b.Run(name, func(b *testing.B) {
				benchAllreduce(b, p, n, algo)
			})
		}
	}
}

func benchSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// benchAllreduce runs b.N allreduces of n float32 on p ranks that stay up
// across iterations, with one buffer pool per rank as a communicator has.
func benchAllreduce(b *testing.B, p, n int, algo collectives.Algo) {
	data := make([][]float32, p)
	for r := range p {
		data[r] = denseInput[float32](1, r, n)
	}
	benchCollective(b, p, 4*n, func(op *collectives.Op) error {
		_, err := collectives.Allreduce(op, data[op.Rank()], collectives.Max, algo, collectives.DefaultCostModel)
		return err
	})
}

// benchCollective runs b.N operations on p in-memory ranks that stay up
// across iterations, with one buffer pool per rank as a communicator has;
// run is one rank's part of one operation, and bytes the vector size for
// MB/s. It reports the busiest rank's payload bytes per operation, to
// compare with AllreduceBytesSent and with nccl-tests' bus bandwidth.
func benchCollective(b *testing.B, p, bytes int, run func(op *collectives.Op) error) {
	b.ReportAllocs()
	b.SetBytes(int64(bytes))
	ts := transport.NewInMemory(p)
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	pools := make([]*collectives.Buffers, p)
	for r := range p {
		pools[r] = &collectives.Buffers{}
	}
	ctx := context.Background()
	before := make([]transport.Stats, p)
	for r := range p {
		before[r] = ts[r].Stats()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		errc := make(chan error, p)
		for r := range p {
			go func(r int) {
				errc <- run(&collectives.Op{Ctx: ctx, T: ts[r], Comm: 1, Seq: uint64(i + 1), Pool: pools[r]})
			}(r)
		}
		for range p {
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	var most uint64
	for r := range p {
		most = max(most, ts[r].Stats().Sub(before[r]).BytesSent)
	}
	b.ReportMetric(float64(most)/float64(b.N), "sent-B/rank")
}

// TestAllreduceMemory bounds the memory an allreduce allocates besides the
// user's buffer: pool scratch, the transport's buffers for early messages
// and requests, measured as heap bytes allocated during the call (an upper
// bound on what is live at its peak). With 1M float32 (4 MB) per rank on 4
// ranks, each rank must allocate less than two more buffers' worth: peak
// memory under 3x the user's buffer. (Scratch is a few 512 KiB segments
// whatever the size, so the ratio only improves for larger vectors.)
func TestAllreduceMemory(t *testing.T) {
	const p, n = 4, 1 << 20
	for _, algo := range allreduceAlgos[1:] {
		t.Run(algo.String(), func(t *testing.T) { checkAllreduceMemory(t, p, n, algo) })
	}
}

func checkAllreduceMemory(t *testing.T, p, n int, algo collectives.Algo) {
	{
		inputs := make([][]float32, p)
		for r := range p {
			inputs[r] = make([]float32, n)
			inputs[r][r] = 1
		}
		// Two collections empty the transport's sync.Pool of buffers left
		// by earlier tests, so every buffer this run uses is counted.
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		errs := runDense(t, p, func(op *collectives.Op) error {
			_, err := collectives.Allreduce(op, inputs[op.Rank()], collectives.Max, algo, collectives.DefaultCostModel)
			return err
		})
		runtime.ReadMemStats(&after)
		requireNoErrors(t, errs)
		perRank := float64(after.TotalAlloc-before.TotalAlloc) / float64(p)
		t.Logf("%v: %.0f KB allocated per rank for a %d KB vector", algo, perRank/1024, 4*n/1024)
		require.Less(t, perRank, float64(2*4*n), "%v allocates more than two vectors per rank", algo)
		for r := range p {
			require.Equal(t, float32(1), inputs[r][0])
			require.Equal(t, float32(1), inputs[r][p-1])
		}
	}
}

// BenchmarkReduceInto measures the reduction kernels on 1M elements
// (MB/s counts the destination's bytes: 1/gamma in the cost model).
func BenchmarkReduceInto(b *testing.B) {
	for _, red := range denseReductions {
		b.Run(fmt.Sprintf("float32/%v", red), func(b *testing.B) { benchReduceInto[float32](b, red) })
		b.Run(fmt.Sprintf("float64/%v", red), func(b *testing.B) { benchReduceInto[float64](b, red) })
	}
}

func benchReduceInto[T collectives.Float](b *testing.B, red collectives.ReduceOp) {
	const n = 1 << 20
	dst, src := denseInput[T](1, 0, n), denseInput[T](1, 1, n)
	b.SetBytes(int64(len(collectives.AsBytes(dst))))
	b.ReportAllocs()
	for b.Loop() {
		collectives.ReduceInto(red, dst, src)
	}
}
