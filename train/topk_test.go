package train

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/train/data"
)

// Top-k at density 1 sends every entry at every step: with Deep Gradient
// Compression's momentum-factor masking the velocity of what was sent is
// cleared, so it is plain SGD with the dense allreduce, to float
// tolerance. At 1% it still trains, sending a fraction of the bytes.
func TestTopKFullDensityIsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var trains, tests []*data.Set
	for r := 0; r < 3; r++ {
		trains = append(trains, denseShard(rng, 32, 12, 3))
		tests = append(tests, denseShard(rng, 8, 12, 3))
	}
	cfg := Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9}
	cfg.Defaults()
	plain := cfg
	plain.Momentum = 0
	dense := runLocal(t, plain, Variant{Reduce: "dense"}, trains, tests)
	full := runLocal(t, cfg, Variant{Reduce: "topk", Density: 1}, trains, tests)
	if d := maxRelDiff(full[0].Model.Params(), dense[0].Model.Params()); d > 1e-3 {
		t.Fatalf("topk at density 1 differs from dense by %g (relative)", d)
	}
	sparse := runLocal(t, cfg, Variant{Reduce: "topk", Density: 0.01}, trains, tests)
	if f := sparse[0].Final(); f.TestLoss >= sparse[0].Records[0].TestLoss || f.BytesSent*5 > dense[0].Final().BytesSent {
		t.Fatalf("topk 1%%: %+v", f)
	}
}

// Without momentum-factor masking the velocity outlives what was sent:
// at density 1 top-k with momentum correction is momentum SGD with the
// dense allreduce, to float tolerance.
func TestTopKNoMaskFullDensityIsMomentumSGD(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var trains, tests []*data.Set
	for r := 0; r < 3; r++ {
		trains = append(trains, denseShard(rng, 32, 12, 3))
		tests = append(tests, denseShard(rng, 8, 12, 3))
	}
	cfg := Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9}
	cfg.Defaults()
	dense := runLocal(t, cfg, Variant{Reduce: "dense"}, trains, tests)
	full := runLocal(t, cfg, Variant{Reduce: "topk", Density: 1, NoMask: true}, trains, tests)
	if d := maxRelDiff(full[0].Model.Params(), dense[0].Model.Params()); d > 1e-3 {
		t.Fatalf("topk at density 1 without masking differs from momentum SGD by %g (relative)", d)
	}
	masked := runLocal(t, cfg, Variant{Reduce: "topk", Density: 1}, trains, tests)
	if d := maxRelDiff(masked[0].Model.Params(), dense[0].Model.Params()); d < 1e-2 {
		t.Fatalf("topk at density 1 with masking is within %g of momentum SGD: masking had no effect", d)
	}
}

// Every variant's name parses back to the same variant; options of topk
// are refused on the others.
func TestParseVariant(t *testing.T) {
	for _, s := range []string{"dense", "sparse", "topk:0.01", "topk:0.001+q4", "topk:0.05+fp16+noef", "topk:0.01+nomask", "topk:0.01+q4+nomask", "topk:0.01+layers", "topk:0.01+q4+nomask+layers", "topk:0.01+global", "topk:0.01+q8+layers+global"} {
		v, err := ParseVariant(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if v.Name() != s {
			t.Errorf("ParseVariant(%q).Name() = %q", s, v.Name())
		}
	}
	if v, _ := ParseVariant("topk:1%+nomask"); !v.NoMask || v.Density != 0.01 {
		t.Errorf("topk:1%%+nomask: %+v", v)
	}
	for _, s := range []string{"dense+nomask", "sparse+noef", "dense+layers", "sparse+global", "topk:2", "topk+q5", "ring"} {
		if _, err := ParseVariant(s); err == nil {
			t.Errorf("ParseVariant(%q) accepted", s)
		}
	}
}

// With +layers every tensor sends its own top ceil(density*size) entries:
// after one step of one rank at 1%, that many entries of each of the
// mlp's six tensors have moved (192 and 128 weights: 2; the rest: 1),
// where whole-model selection moves the top ceil(1% of 371) = 4
// entries, wherever they are.
func TestTopKPerLayerSelectsInEveryTensor(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	trains := []*data.Set{denseShard(rng, 8, 12, 3)}
	tests := []*data.Set{denseShard(rng, 8, 12, 3)}
	cfg := Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 1, Batch: 8, LR: 0.05, Momentum: 0.9}
	cfg.Defaults()
	c := cfg
	init, err := (&Job{Cfg: &c, Train: trains[0], Test: tests[0]}).NewModel()
	if err != nil {
		t.Fatal(err)
	}
	moved := func(v Variant) (perTensor []int, total int) {
		m := runLocal(t, cfg, v, trains, tests)[0].Model
		for _, ts := range m.Tensors() {
			n := 0
			for i := ts.Offset; i < ts.Offset+ts.Size(); i++ {
				if m.Params()[i] != init.Params()[i] {
					n++
				}
			}
			perTensor, total = append(perTensor, n), total+n
		}
		return perTensor, total
	}
	layers, _ := moved(Variant{Reduce: "topk", Density: 0.01, PerLayer: true})
	want := []int{2, 1, 2, 1, 1, 1} // w0 12x16, b0 16, w1 16x8, b1 8, w2 8x3, b2 3
	if fmt.Sprint(layers) != fmt.Sprint(want) {
		t.Errorf("per-layer selection moved %v entries of the tensors, want %v", layers, want)
	}
	if _, total := moved(Variant{Reduce: "topk", Density: 0.01}); total != 4 {
		t.Errorf("whole-model selection moved %d entries, want 4", total)
	}
}

// With the global scope one step of 4 ranks at 1% moves K = ceil(1% of
// 371) = 4 entries of the model, the exact top 4 of the ranks' summed
// selections, where the union moves every rank's 4.
func TestTopKGlobalScopeMovesK(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var trains, tests []*data.Set
	for range 4 {
		trains = append(trains, denseShard(rng, 8, 12, 3))
		tests = append(tests, denseShard(rng, 8, 12, 3))
	}
	cfg := Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 1, Batch: 8, LR: 0.05, Momentum: 0.9}
	cfg.Defaults()
	c := cfg
	init, err := (&Job{Cfg: &c, Train: trains[0], Test: tests[0]}).NewModel()
	if err != nil {
		t.Fatal(err)
	}
	moved := func(v Variant) int {
		n := 0
		for _, res := range runLocal(t, cfg, v, trains, tests) {
			period, warmup := 0, 0.0 // recorded for the global scope only
			if v.Scope == compress.ScopeGlobal {
				period, warmup = cfg.GlobalPeriod, cfg.GlobalWarmupEpochs
			}
			if f := res.Final(); f.GlobalPeriod != period || f.GlobalWarmupEpochs != warmup {
				t.Fatalf("%s: records global_period %d and global_warmup_epochs %v, want %d and %v",
					v.Name(), f.GlobalPeriod, f.GlobalWarmupEpochs, period, warmup)
			}
			m := 0
			for i, x := range res.Model.Params() {
				if x != init.Params()[i] {
					m++
				}
			}
			if n != 0 && m != n {
				t.Fatalf("%s: ranks moved %d and %d entries", v.Name(), n, m)
			}
			n = m
		}
		return n
	}
	if n := moved(Variant{Reduce: "topk", Density: 0.01, Scope: compress.ScopeGlobal}); n != 4 {
		t.Errorf("global scope moved %d entries, want 4", n)
	}
	cfg.GlobalPeriod = 1 // an exact threshold at every step: the same K
	if n := moved(Variant{Reduce: "topk", Density: 0.01, Scope: compress.ScopeGlobal}); n != 4 {
		t.Errorf("global scope with period 1 moved %d entries, want 4", n)
	}
	// Over several steps the period reaches the compressor: exact
	// selections on every step send other bytes than the estimates
	// between exact steps.
	long := cfg
	long.Epochs = 6
	bytesWith := func(period int) float64 {
		long.GlobalPeriod = period
		return runLocal(t, long, Variant{Reduce: "topk", Density: 0.01, Scope: compress.ScopeGlobal}, trains, tests)[0].Final().BytesSent
	}
	exact, estimated := bytesWith(1), bytesWith(0)
	t.Logf("bytes a rank over %d steps: period 1 %v, default period %v", long.Epochs, exact, estimated)
	if exact == estimated {
		t.Errorf("period 1 and the default period sent the same bytes a rank (%v): the period did not reach the compressor", exact)
	}
	union := moved(Variant{Reduce: "topk", Density: 0.01})
	if union <= 4 {
		t.Errorf("union moved %d entries, want more than the global scope's 4", union)
	}
	// At the start of --global-warmup-epochs the global selection keeps
	// up to P·K = 16 sums, all of the 4 ranks' 4 each: the one step, at
	// epoch 0, moves what the union moves (and moved checks the record).
	cfg.GlobalPeriod, cfg.GlobalWarmupEpochs = 0, 1
	if n := moved(Variant{Reduce: "topk", Density: 0.01, Scope: compress.ScopeGlobal}); n != union {
		t.Errorf("global scope at the start of its warm-up moved %d entries, want the union's %d", n, union)
	}
}

// The global scope at density 1 keeps every nonzero sum, so without
// masking it is momentum SGD with the dense allreduce, to float
// tolerance: the kept sums are averaged over every rank, not over their
// senders. At 1% it trains (at this size the threshold's count exchanges
// outweigh the entries; TestTopKGlobalScopeMovesK compares the counts).
func TestTopKGlobalFullDensityIsMomentumSGD(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var trains, tests []*data.Set
	for r := 0; r < 4; r++ {
		trains = append(trains, denseShard(rng, 32, 12, 3))
		tests = append(tests, denseShard(rng, 8, 12, 3))
	}
	cfg := Config{Model: "mlp", Hidden: []int{16, 8}, Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9}
	cfg.Defaults()
	dense := runLocal(t, cfg, Variant{Reduce: "dense"}, trains, tests)
	v := Variant{Reduce: "topk", Density: 1, NoMask: true, Scope: compress.ScopeGlobal}
	full := runLocal(t, cfg, v, trains, tests)
	if d := maxRelDiff(full[0].Model.Params(), dense[0].Model.Params()); d > 1e-3 {
		t.Fatalf("%s differs from momentum SGD by %g (relative)", v.Name(), d)
	}
	v.Density = 0.01
	sparse := runLocal(t, cfg, v, trains, tests)
	if f := sparse[0].Final(); f.TestLoss >= sparse[0].Records[0].TestLoss {
		t.Fatalf("%s: %+v", v.Name(), f)
	}
}
