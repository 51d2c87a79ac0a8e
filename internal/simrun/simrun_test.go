package simrun

import (
	"reflect"
	"testing"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport/sim"
)

// defaultMachine is a 10 Gbit/s network with compute charged by the model.
func defaultMachine(p int) sim.Config {
	return sim.Config{Ranks: p, Rate: 1.25e9, Latency: 5e-6}
}

// TestEveryAlgorithmAt64 checks every algorithm's result on every rank
// against the sum computed locally, at 64 ranks on hosts of 8 (so that the
// hierarchical allreduce runs its chunk pipeline), and that the bytes every
// rank of a sparse algorithm sent are the model's exact prediction.
func TestEveryAlgorithmAt64(t *testing.T) {
	cfg := defaultMachine(64)
	cfg.Topology, cfg.RanksPerHost = sim.Hosts, 8
	for _, name := range OpNames() {
		for _, a := range Ops[name].Algos(cfg.Topology) {
			for _, dist := range []string{"uniform", "powerlaw"} {
				if name == "allreduce" && dist == "powerlaw" {
					continue
				}
				c := Case{Op: name, N: 40000, Density: 0.01, Dist: dist, Algo: a, Seed: 3, Model: collectives.DefaultCostModel}
				if name == "allreduce" && a == collectives.AlgoHierarchical {
					c.N = 20 << 20 / 4 // several chunks in the pipeline
				}
				res := simulate(t, cfg, c)
				if name == "sparse-allreduce" && !reflect.DeepEqual(res.BytesSent, res.PredictedB) {
					t.Errorf("%v %s: bytes sent %v, the model predicts %v", a, dist, res.BytesSent[:4], res.PredictedB[:4])
				}
			}
		}
	}
}

// TestSparseBytesAt512: the bytes per rank of every sparse algorithm are
// the cost model's prediction from the counts, at 512 ranks. Raw
// indices: with IndexAuto every rank prices the index wire for every
// owner (CostModel.chooseWire), which at 1024 ranks costs about half a
// second of CPU per rank and call.
func TestSparseBytesAt512(t *testing.T) {
	if testing.Short() {
		t.Skip("512 ranks")
	}
	for _, a := range Ops["sparse-allreduce"].Algos(sim.Flat)[1:] {
		c := Case{Op: "sparse-allreduce", N: 1 << 16, Density: 0.001, Dist: "uniform", Algo: a, Seed: 5, Model: collectives.DefaultCostModel,
			Indices: collectives.IndexRaw}
		res := simulate(t, defaultMachine(512), c)
		if !reflect.DeepEqual(res.BytesSent, res.PredictedB) {
			t.Errorf("%v: bytes sent differ from the prediction", a)
		}
	}
}

// TestQuantizedSparse runs the lossy value codecs through the simulator.
func TestQuantizedSparse(t *testing.T) {
	c := Case{Op: "sparse-allreduce", N: 20000, Density: 0.02, Dist: "uniform", Algo: collectives.AlgoSSARSplitAllgather,
		Quant: quant.FP16, Seed: 2, Model: collectives.DefaultCostModel}
	simulate(t, defaultMachine(16), c)
}

// TestDeterministic: two runs of the same case give the same virtual
// times, bytes and busiest link, on every topology.
func TestDeterministic(t *testing.T) {
	for _, topo := range []sim.Topology{sim.Flat, sim.Hosts, sim.FatTree} {
		cfg := defaultMachine(32)
		cfg.Topology, cfg.RanksPerHost, cfg.Oversubscription = topo, 4, 2
		c := Case{Op: "sparse-allreduce", N: 50000, Density: 0.01, Dist: "powerlaw", Algo: collectives.AlgoAuto, Seed: 9,
			Model: collectives.DefaultCostModel}
		a, b := simulate(t, cfg, c), simulate(t, cfg, c)
		if a.Seconds != b.Seconds || !reflect.DeepEqual(a.BytesSent, b.BytesSent) || a.Busiest != b.Busiest {
			t.Errorf("%v: two runs differ: %v %v / %v %v", topo, a.Seconds, a.Busiest, b.Seconds, b.Busiest)
		}
	}
}

// TestDeadlockFails: a job whose ranks wait for messages nobody sends
// fails with ErrDeadlock instead of hanging.
func TestDeadlockFails(t *testing.T) {
	w, err := sim.New(defaultMachine(4))
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 4)
	_, err = w.Run(func(tr *sim.Transport) {
		r := tr.Recv((tr.Rank()+1)%4, tagOf(1), descOf(), nil)
		errs[tr.Rank()] = r.Wait(t.Context())
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, e := range errs {
		if e != sim.ErrDeadlock {
			t.Errorf("rank %d: %v, want ErrDeadlock", r, e)
		}
	}
}
