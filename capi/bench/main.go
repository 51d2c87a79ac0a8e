// Command bench times blocking allreduces called from Go exactly as
// python/tools/bench.py times them from Python, so that the two measure
// the same operation and differ only by the binding (Python, ctypes, the C
// ABI's cgo call): per iteration a barrier, then one timed
// sparcml.Allreduce in the caller's goroutine (the call the C ABI makes);
// each iteration's time is the slowest rank's, and the median is printed.
//
//	sparcml run -n 2 -- go run ./capi/bench --sizes 8,1024 --iters 2000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparcml/sparcml"
)

func main() {
	sizes := flag.String("sizes", "8", "element counts, comma-separated (K, M suffixes x1024)")
	iters := flag.Int("iters", 1000, "timed iterations per size")
	warmup := flag.Int("warmup", 100, "untimed iterations per size")
	locked := flag.Bool("locked", false, "run locked to the main thread, as a call from C (a cgo callback) runs")
	flag.Parse()
	if *locked {
		runtime.LockOSThread()
	}
	if err := run(*sizes, *iters, *warmup, *locked); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(sizes string, iters, warmup int, locked bool) error {
	ctx := context.Background()
	c, err := sparcml.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, s := range strings.Split(sizes, ",") {
		mult := 1
		switch {
		case strings.HasSuffix(s, "K"):
			s, mult = strings.TrimSuffix(s, "K"), 1<<10
		case strings.HasSuffix(s, "M"):
			s, mult = strings.TrimSuffix(s, "M"), 1<<20
		}
		n, err := strconv.Atoi(s)
		n *= mult
		if err != nil {
			return fmt.Errorf("--sizes %q: %w", sizes, err)
		}
		data := make([]float32, n)
		times := make([]float64, iters)
		for it := -warmup; it < iters; it++ {
			for i := range data {
				data[i] = 1
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			t0 := time.Now()
			if err := sparcml.Allreduce(ctx, c, data, sparcml.Sum); err != nil {
				return err
			}
			if it >= 0 {
				times[it] = time.Since(t0).Seconds()
			}
		}
		if err := sparcml.Allreduce(ctx, c, times, sparcml.Max); err != nil {
			return err
		}
		slices.Sort(times)
		if c.Rank() == 0 {
			binding := "go"
			if locked {
				binding = "go-locked"
			}
			row := map[string]any{"binding": binding, "op": "allreduce", "np": c.Size(), "n": n, "dtype": "float32",
				"iters": iters, "time_us_median": times[iters/2] * 1e6, "time_us_min": times[0] * 1e6}
			b, _ := json.Marshal(row)
			fmt.Println(string(b))
		}
	}
	return nil
}
