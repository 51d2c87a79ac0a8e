package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/data"
)

// runLocal trains on p in-process ranks over the in-memory transport,
// rank r on shards[r], and returns every rank's result.
func runLocal(t *testing.T, cfg Config, v Variant, trains, tests []*data.Set) []*Result {
	t.Helper()
	p := len(trains)
	comms, err := sparcml.Local(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := make([]*Result, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := 0; r < p; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer comms[r].Close()
			c := cfg
			job := &Job{Comm: comms[r], Cfg: &c, Train: trains[r], Test: tests[r]}
			res[r], errs[r] = job.Run(ctx, v, nil)
			if errs[r] != nil {
				comms[r].Abort(errs[r])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}

// interleave builds the one-rank set whose consecutive batches of
// len(sets)*b samples are the ranks' batches of b, in rank order.
func interleave(sets []*data.Set, b int) *data.Set {
	first := sets[0]
	out := &data.Set{Name: "union", Dim: first.Dim, Classes: first.Classes}
	if first.Sparse() {
		out.RowPtr = []int{0}
	}
	for lo := 0; lo+b <= first.Len(); lo += b {
		for _, s := range sets {
			for r := lo; r < lo+b; r++ {
				idx, val := s.Row(r)
				if first.Sparse() {
					out.Idx = append(out.Idx, idx...)
					out.Val = append(out.Val, val...)
					out.RowPtr = append(out.RowPtr, len(out.Idx))
				} else {
					out.X = append(out.X, val...)
				}
				out.Labels = append(out.Labels, s.Labels[r])
			}
		}
	}
	return out
}

func denseShard(rng *rand.Rand, n, dim, classes int) *data.Set {
	s := &data.Set{Name: "dense", Dim: dim, Classes: classes, X: make([]float32, n*dim), Labels: make([]int32, n)}
	for i := range s.Labels {
		s.Labels[i] = int32(rng.IntN(classes))
		for j := 0; j < dim; j++ {
			s.X[i*dim+j] = float32(rng.Float64()) + 0.3*float32(s.Labels[i]*int32(j%3))
		}
	}
	return s
}

func synthShards(t *testing.T, p int, g data.Synth) (trains, tests []*data.Set) {
	for r := 0; r < p; r++ {
		tr, te, err := g.Generate(data.Options{Rank: r, Size: p})
		if err != nil {
			t.Fatal(err)
		}
		trains, tests = append(trains, tr), append(tests, te)
	}
	return trains, tests
}

func maxRelDiff(a, b []float32) float64 {
	var worst float64
	for i := range a {
		d := math.Abs(float64(a[i])-float64(b[i])) / (1e-3 + math.Abs(float64(b[i])))
		worst = max(worst, d)
	}
	return worst
}

// P-rank data-parallel SGD with per-rank batch B ends with the
// parameters of one-rank SGD with batch P*B over the same samples in the
// same order: the mlp with momentum and weight decay, the logistic
// regression with plain SGD.
func TestDataParallelEqualsLargeBatch(t *testing.T) {
	const b = 4
	for _, c := range []struct {
		name string
		cfg  Config
		mk   func(p int) ([]*data.Set, []*data.Set)
	}{
		{"mlp", Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 3, Batch: b, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, NoShuffle: true},
			func(p int) ([]*data.Set, []*data.Set) {
				rng := rand.New(rand.NewPCG(1, 2))
				var trains, tests []*data.Set
				for r := 0; r < p; r++ {
					trains = append(trains, denseShard(rng, 4*b, 12, 3))
					tests = append(tests, denseShard(rng, 5, 12, 3))
				}
				return trains, tests
			}},
		{"logreg", Config{Model: "logreg", Epochs: 2, Batch: b, LR: 2, NoShuffle: true},
			func(p int) ([]*data.Set, []*data.Set) {
				g := data.Synth{Name: "s", Dim: 5000, NNZ: 20, Samples: p * 6 * b, Exponent: 1.1, Noise: 0.3, Seed: 4}
				return synthShards(t, p, g)
			}},
	} {
		for _, p := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/P=%d", c.name, p), func(t *testing.T) {
				trains, tests := c.mk(p)
				cfg := c.cfg
				cfg.Defaults()
				many := runLocal(t, cfg, Variant{Reduce: "dense"}, trains, tests)
				one := cfg
				one.Batch = p * b
				ref := runLocal(t, one, Variant{Reduce: "dense"}, []*data.Set{interleave(trains, b)}, tests[:1])
				want := ref[0].Model.Params()
				for r, res := range many {
					if d := maxRelDiff(res.Model.Params(), want); d > 1e-4 {
						t.Fatalf("rank %d: parameters differ from the one-rank run by %g (relative)", r, d)
					}
				}
				fresh, err := (&Job{Cfg: &one, Train: trains[0], Test: tests[0]}).NewModel()
				if err != nil {
					t.Fatal(err)
				}
				if d := maxRelDiff(want, fresh.Params()); d < 1e-2 {
					t.Fatalf("the training moved the parameters by only %g", d)
				}
				if got, steps := many[0].Final().Step, cfg.Epochs*trains[0].Len()/b; got != steps {
					t.Fatalf("final step %d, want %d", got, steps)
				}
			})
		}
	}
}

// The exact sparse allreduce of a gradient sparse by nature gives the
// dense allreduce's result, for logistic regression binary and
// multinomial, while sending less.
func TestSparseReductionMatchesDense(t *testing.T) {
	g := data.Synth{Name: "s", Dim: 200000, NNZ: 30, Samples: 3 * 400, Exponent: 1.1, Noise: 0.3, Informative: 2000, Seed: 9}
	for _, p := range []int{3, 4} {
		t.Run(fmt.Sprint("P=", p), func(t *testing.T) {
			trains, tests := synthShards(t, p, g)
			cfg := Config{Model: "logreg", Epochs: 2, Batch: 32, LR: 5}
			cfg.Defaults()
			dense := runLocal(t, cfg, Variant{Reduce: "dense"}, trains, tests)
			sparse := runLocal(t, cfg, Variant{Reduce: "sparse"}, trains, tests)
			if d := maxRelDiff(sparse[0].Model.Params(), dense[0].Model.Params()); d > 1e-4 {
				t.Fatalf("parameters differ by %g (relative)", d)
			}
			df, sf := dense[0].Final(), sparse[0].Final()
			if math.Abs(df.TestLoss-sf.TestLoss) > 1e-5*df.TestLoss || df.TestAccuracy != sf.TestAccuracy {
				t.Fatalf("dense %+v, sparse %+v", df, sf)
			}
			if sf.BytesSent*10 > df.BytesSent {
				t.Fatalf("sparse sent %.0f bytes per rank, dense %.0f", sf.BytesSent, df.BytesSent)
			}
			if first := sparse[0].Records[0]; sf.TestLoss > first.TestLoss-0.01 {
				t.Fatalf("test loss %.4f after 2 epochs, %.4f before", sf.TestLoss, first.TestLoss)
			}
		})
	}
}

// Every rank gets a shard's error, with the file and line, through
// Agree; a rank without an error learns the failing rank's message.
func TestAgree(t *testing.T) {
	for _, bad := range [][]int{nil, {2}, {1, 3}} {
		comms, _ := sparcml.Local(4)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				for _, b := range bad {
					if b == r {
						err = fmt.Errorf("f.svm:%d: bad data", 10+r)
					}
				}
				errs[r] = Agree(ctx, comms[r], err)
			}()
		}
		wg.Wait()
		cancel()
		for r, err := range errs {
			if len(bad) == 0 {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				continue
			}
			want := fmt.Sprintf("rank %d: f.svm:%d: bad data", bad[0], 10+bad[0])
			if err == nil || err.Error() != want {
				t.Fatalf("rank %d: %v, want %q", r, err, want)
			}
		}
		for _, c := range comms {
			c.Close()
		}
	}
}
