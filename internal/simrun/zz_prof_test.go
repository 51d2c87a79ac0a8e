package simrun

import (
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
)

func TestZZProf(t *testing.T) {
	p, _ := strconv.Atoi(os.Getenv("ZZP"))
	n, _ := strconv.Atoi(os.Getenv("ZZN"))
	a, _ := collectives.ParseAlgo(os.Getenv("ZZA"))
	stop := make(chan struct{})
	go func() {
		var best uint64
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > best+best/10 {
				best = ms.HeapAlloc
				f, _ := os.Create("/tmp/ss/heap.prof")
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
				t.Logf("heap %d MB", best>>20)
			}
		}
	}()
	start := time.Now()
	c := Case{Op: "sparse-allreduce", N: n, Density: 0.01, Dist: "uniform", Algo: a, Seed: 1, Model: collectives.DefaultCostModel, Indices: collectives.IndexRaw}
	res, err := Run(defaultMachine(p), c, false)
	close(stop)
	t.Logf("%v %v sim %v wall %v sent %d", err, res.Algo, res.Seconds, time.Since(start), res.MaxBytesSent)
}
