package collectives_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// Block (row-sparse) inputs: every algorithm against a reference summed
// row by row from every rank's seeded input.

var spBlockCases = []spAlgoCase{
	{"rd", collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling}},
	{"split", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather}},
	{"split-balanced", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Balanced: true}},
	{"dsar", collectives.SparseOptions{Algo: collectives.AlgoDSAR}},
	{"allgather", collectives.SparseOptions{Algo: collectives.AlgoSparseAllgather}},
	{"auto", collectives.SparseOptions{Algo: collectives.AlgoAuto}},
	{"rd-denseout", collectives.SparseOptions{Algo: collectives.AlgoSSARRecursiveDoubling, DenseOut: true}},
	{"split-packed", collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Indices: collectives.IndexPacked}},
}

// Patterns of block inputs: "empty-rank" leaves rank 1 without rows,
// "identical" gives every rank the same rows, "powerlaw" draws rows from
// a power law, "dense-range" gives every rank 90% of the first of P
// equal ranges, so that range of the result goes dense (for narrow rows)
// while the whole stays sparse, "dense" hands some ranks a dense matrix.
var spBlockKinds = []string{"empty-rank", "identical", "powerlaw", "dense-range", "dense", "all-empty"}

// spBlockInputs returns every rank's block input. Values are positive
// small integers: sums are exact in any order and never cancel, so every
// touched row is nonzero in the result.
func spBlockInputs[T collectives.Float](rng *rand.Rand, p, rows, width int, kind string) []*sparse.Vector[T] {
	pick := func(n, limit int) []uint32 {
		n = min(n, limit)
		idx := rng.Perm(limit)[:n]
		out := make([]uint32, n)
		for i, x := range idx {
			out[i] = uint32(x)
		}
		slices.Sort(out)
		return out
	}
	mk := func(idx []uint32) *sparse.Vector[T] {
		vals := make([]T, len(idx)*width)
		for i := range vals {
			vals[i] = T(1 + rng.IntN(7))
		}
		return &sparse.Vector[T]{Dim: rows, Block: width, Indices: idx, Values: vals}
	}
	shared := pick(max(rows/10, 1), rows)
	out := make([]*sparse.Vector[T], p)
	for r := range out {
		switch kind {
		case "empty-rank":
			out[r] = mk(pick(max(rows/20, 1), rows))
			if r == 1%p {
				out[r] = mk(nil)
			}
		case "identical":
			out[r] = mk(slices.Clone(shared))
		case "powerlaw":
			seen := map[uint32]bool{}
			var idx []uint32
			for range max(rows/20, 1) {
				x := uint32(float64(rows) * math.Pow(rng.Float64(), 4))
				if !seen[x] {
					seen[x] = true
					idx = append(idx, x)
				}
			}
			slices.Sort(idx)
			out[r] = mk(idx)
		case "dense-range":
			// The first of P equal ranges, but for every tenth row.
			var idx []uint32
			for x := range rows / p {
				if x%10 != 0 {
					idx = append(idx, uint32(x))
				}
			}
			out[r] = mk(idx)
		case "dense":
			out[r] = mk(pick(rows, rows))
			if r%2 == 0 {
				out[r].Densify()
			}
		case "all-empty":
			out[r] = mk(nil)
		}
	}
	return out
}

// spBlockReference sums the inputs row by row.
func spBlockReference[T collectives.Float](in []*sparse.Vector[T], width int) map[int][]T {
	ref := map[int][]T{}
	add := func(row int, vals []T) {
		if ref[row] == nil {
			ref[row] = make([]T, width)
		}
		for i, x := range vals {
			ref[row][i] += x
		}
	}
	for _, v := range in {
		if v.Dense {
			for row := range v.Dim {
				add(row, v.Values[row*width:(row+1)*width])
			}
			continue
		}
		for k, row := range v.Indices {
			add(int(row), v.Values[k*width:(k+1)*width])
		}
	}
	return ref
}

// spCheckBlockResult compares a block result with the reference: the
// same block, every stored row equal to its sum, every touched row
// present, and in sparse form no row that nobody touched (so no all-zero
// row, the reference having no cancellations).
func spCheckBlockResult[T collectives.Float](got *sparse.Vector[T], ref map[int][]T, rows, width int) error {
	if err := got.Validate(); err != nil {
		return err
	}
	if got.Dim != rows || got.BlockLen() != width {
		return fmt.Errorf("%d rows of %d, want %d of %d", got.Dim, got.BlockLen(), rows, width)
	}
	zero := make([]T, width)
	if got.Dense {
		for row := range rows {
			want := ref[row]
			if want == nil {
				want = zero
			}
			if !slices.Equal(got.Values[row*width:(row+1)*width], want) {
				return fmt.Errorf("row %d: got %v, want %v", row, got.Values[row*width:(row+1)*width], want)
			}
		}
		return nil
	}
	if len(got.Indices) != len(ref) {
		return fmt.Errorf("%d rows stored, %d touched", len(got.Indices), len(ref))
	}
	for k, row := range got.Indices {
		want, ok := ref[int(row)]
		if !ok {
			return fmt.Errorf("row %d stored but touched by no rank (values %v)", row, got.Values[k*width:(k+1)*width])
		}
		if !slices.Equal(got.Values[k*width:(k+1)*width], want) {
			return fmt.Errorf("row %d: got %v, want %v", row, got.Values[k*width:(k+1)*width], want)
		}
	}
	return nil
}

func testSparseBlockAllreduce[T collectives.Float](t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	for _, ac := range spBlockCases {
		t.Run(ac.name, func(t *testing.T) {
			for _, p := range []int{1, 3, 4, 5, 8} {
				for _, kind := range spBlockKinds {
					rows, width := []int{1, 40, 400}[rng.IntN(3)], []int{2, 3, 16}[rng.IntN(3)]
					in := spBlockInputs[T](rng, p, rows, width, kind)
					name := fmt.Sprintf("P=%d %d rows of %d %s", p, rows, width, kind)
					outs, stats, sent, errs := spRun(t, in, ac.opts)
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", name, r, err)
						}
					}
					ref := spBlockReference(in, width)
					for r, out := range outs {
						if err := spCheckBlockResult(out, ref, rows, width); err != nil {
							t.Fatalf("%s (%v): rank %d: %v", name, stats[r].Algo, r, err)
						}
						if !spSameBits(outs[0], out) {
							t.Fatalf("%s: rank %d's result differs from rank 0's", name, r)
						}
					}
					if p > 1 {
						pred := collectives.PredictSparseExact(collectives.DefaultCostModel, stats[0].Algo, in, ac.opts, stats[0].Bounds)
						if !slices.Equal(pred.BytesSent, sent) {
							t.Fatalf("%s %v: bytes sent per rank %v, predicted %v", name, stats[0].Algo, sent, pred.BytesSent)
						}
					}
				}
			}
		})
	}
}

func TestSparseBlockAllreduceFloat32(t *testing.T) { testSparseBlockAllreduce[float32](t, 1) }
func TestSparseBlockAllreduceFloat64(t *testing.T) { testSparseBlockAllreduce[float64](t, 2) }

// TestSparseBlockIndexBytes: a row travels as one index and its values.
// The allgather baseline sends each rank's input, so a rank's payload is
// its encoded input (header, rows*4 index bytes, rows*width values) times
// the number of ranks it reaches, counted independently of the cost
// model: a Bruck allgather of P=2 is one message each way.
func TestSparseBlockIndexBytes(t *testing.T) {
	const rows, width, touched = 1000, 64, 50
	in := spBlockInputs[float32](rand.New(rand.NewPCG(5, 5)), 2, rows, width, "identical") // 100 rows each
	in[0].Indices, in[0].Values = in[0].Indices[:touched], in[0].Values[:touched*width]
	in[1].Indices, in[1].Values = nil, nil
	_, _, sent, errs := spRun(t, in, collectives.SparseOptions{Algo: collectives.AlgoSparseAllgather})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := int64(sparse.BlockHeaderSize + touched*sparse.IndexSize + touched*width*4)
	if sent[0] != want {
		t.Fatalf("rank 0 sent %d bytes for %d rows of %d floats, want %d (one index per row)", sent[0], touched, width, want)
	}
}

// TestSparseBlockMismatch: ranks that pass different row widths, or a
// block vector with a lossy codec, fail on every rank.
func TestSparseBlockMismatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	in := spBlockInputs[float32](rng, 3, 40, 4, "identical")
	in[2] = spBlockInputs[float32](rng, 1, 40, 5, "identical")[0]
	for _, ac := range spBlockCases {
		_, _, _, errs := spRun(t, in, ac.opts)
		for r, err := range errs {
			if err == nil {
				t.Fatalf("%s: rank %d succeeded with widths 4, 4, 5", ac.name, r)
			}
		}
	}
	good := spBlockInputs[float32](rng, 3, 40, 4, "identical")
	_, _, _, errs := spRun(t, good, collectives.SparseOptions{Algo: collectives.AlgoSSARSplitAllgather, Quant: quant.FP16})
	for r, err := range errs {
		if !errors.Is(err, transport.ErrInvalid) {
			t.Fatalf("lossy codec on rows: rank %d: %v, want ErrInvalid", r, err)
		}
	}
}

// TestSparseBlockDenseRangeHasNoZeroRows: when the reduced range an owner
// sends goes dense, the sparse result still holds only the touched rows.
func TestSparseBlockDenseRangeHasNoZeroRows(t *testing.T) {
	const p, rows, width = 4, 4000, 4
	in := spBlockInputs[float32](rand.New(rand.NewPCG(8, 8)), p, rows, width, "dense-range")
	if !sparse.PreferDense(len(in[0].Indices), rows/p, in[0].EntrySize()) {
		t.Fatalf("the test's range of %d rows with %d touched would not go dense", rows/p, len(in[0].Indices))
	}
	for _, ac := range spBlockCases[:2] {
		outs, _, _, errs := spRun(t, in, ac.opts)
		ref := spBlockReference(in, width)
		for r, out := range outs {
			if errs[r] != nil {
				t.Fatalf("%s: rank %d: %v", ac.name, r, errs[r])
			}
			if out.Dense {
				t.Fatalf("%s: rank %d: result dense with %d of %d rows touched", ac.name, r, len(ref), rows)
			}
			if err := spCheckBlockResult(out, ref, rows, width); err != nil {
				t.Fatalf("%s: rank %d: %v", ac.name, r, err)
			}
		}
	}
}

// TestSparseBlockAverage: Avg divides every value of every row by P, on
// every algorithm, as the sum of the reference divided in T.
func TestSparseBlockAverage(t *testing.T) {
	const p, rows, width = 3, 300, 5
	in := spBlockInputs[float32](rand.New(rand.NewPCG(9, 9)), p, rows, width, "powerlaw")
	ref := spBlockReference(in, width)
	for row, vals := range ref {
		for j := range vals {
			ref[row][j] = vals[j] / p
		}
	}
	for _, ac := range spBlockCases {
		opts := ac.opts
		opts.Reduce = collectives.Avg
		outs, _, _, errs := spRun(t, in, opts)
		for r, out := range outs {
			if errs[r] != nil {
				t.Fatalf("%s: rank %d: %v", ac.name, r, errs[r])
			}
			if err := spCheckBlockResult(out, ref, rows, width); err != nil {
				t.Fatalf("%s: rank %d: %v", ac.name, r, err)
			}
		}
	}
}

// TestSparseBlockHierarchicalRefused: the hierarchical schedule does not
// take rows, and says so on every rank.
func TestSparseBlockHierarchicalRefused(t *testing.T) {
	in := spBlockInputs[float32](rand.New(rand.NewPCG(10, 10)), 3, 40, 4, "identical")
	_, _, _, errs := spRun(t, in, collectives.SparseOptions{Algo: collectives.AlgoHierarchical})
	for r, err := range errs {
		if !errors.Is(err, transport.ErrInvalid) {
			t.Fatalf("rank %d: %v, want ErrInvalid", r, err)
		}
	}
}
