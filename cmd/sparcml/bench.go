package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/internal/config"
)

const benchUsage = `usage: sparcml bench [-n N] [--op OP] [--sizes MIN:MAX | --bytes MIN:MAX] [flags]

Times an operation as nccl-tests do: per size, warm-up iterations, then
timed ones, each started after a barrier; an iteration's time is the
slowest rank's. Without -n it joins the job its environment describes
(sparcml run, srun, mpirun, torchrun). Output columns and JSON fields are
described in docs/CLI.md.

flags:`

func benchCmd(args []string) error {
	cfg, err := parseBenchFlags(args)
	if err == errHelp {
		fmt.Println(benchUsage)
		printFlags(os.Stdout, newBenchFlags(&benchConfig{}, &benchFlagValues{}), hiddenBenchFlags)
		return nil
	}
	if err != nil {
		return err
	}
	env, err := config.Load(os.Getenv)
	if err != nil {
		return err
	}
	if cfg.n > 0 {
		return relaunchSelf(relaunchJob{sub: "bench", args: cfg.args, n: cfg.n, progress: cfg.progress.show(), bindTo: cfg.bindTo, token: env.Token})
	}
	return runBench(cfg)
}

func runBench(cfg *benchConfig) error {
	ctx := context.Background()
	comm, err := sparcml.Init(ctx, sparcml.WithTransport(cfg.transport))
	if err != nil {
		return err
	}
	defer comm.Close()
	if stop, err := startCPUProfile(cfg, comm.Rank()); err != nil {
		return err
	} else {
		defer stop()
	}
	out := newReporter(os.Stdout, cfg.format, comm.Rank() == 0)
	var p progress
	if cfg.progress.show() && comm.Rank() == 0 {
		p = progress{w: os.Stderr, total: len(cfg.sizes)}
	}
	if strings.HasPrefix(cfg.op, "sparse-") || cfg.op == "compress" {
		p.total *= len(cfg.densities)
		return runSparseBench(ctx, comm, cfg, out, p)
	}
	for i, n := range cfg.sizes {
		p.show(i, cfg.op, n)
		var res []result
		var err error
		switch {
		case cfg.inflight > 0 && cfg.dtype == "float32":
			res, err = benchOverlap[float32](ctx, comm, cfg, n)
		case cfg.inflight > 0:
			res, err = benchOverlap[float64](ctx, comm, cfg, n)
		case cfg.dtype == "float32":
			res, err = benchSize[float32](ctx, comm, cfg, n)
		default:
			res, err = benchSize[float64](ctx, comm, cfg, n)
		}
		if err != nil {
			p.clear()
			return err
		}
		p.clear()
		for _, r := range res {
			if err := out.row(r); err != nil {
				return err
			}
		}
	}
	out.close()
	return checkFailures(out.rows, comm.Rank())
}

func runSparseBench(ctx context.Context, comm *sparcml.Comm, cfg *benchConfig, out *reporter, p progress) error {
	i := 0
	for _, n := range cfg.sizes {
		for _, d := range cfg.densities {
			p.show(i, cfg.op, n)
			i++
			var res []result
			var err error
			switch {
			case cfg.op == "compress" && cfg.dtype == "float32":
				res, err = benchCompress[float32](ctx, comm, cfg, n, d)
			case cfg.op == "compress":
				res, err = benchCompress[float64](ctx, comm, cfg, n, d)
			case cfg.dtype == "float32":
				res, err = benchSparse[float32](ctx, comm, cfg, n, d)
			default:
				res, err = benchSparse[float64](ctx, comm, cfg, n, d)
			}
			p.clear()
			if err != nil {
				return err
			}
			for _, r := range res {
				if err := out.row(r); err != nil {
					return err
				}
			}
		}
	}
	out.close()
	return checkFailures(out.rows, comm.Rank())
}

// checkFailures returns, on rank 0, an error naming every row whose check
// failed. Every rank has the same rows; the others return nil, so that
// none exits before rank 0 has printed its rows and the error (a launcher
// stops the job when the first rank fails), and rank 0's exit status is
// the job's.
func checkFailures(rows []result, rank int) error {
	var failed []string
	for _, r := range rows {
		if r.Check != "fail" {
			continue
		}
		what := fmt.Sprintf("%s n=%d", r.Op, r.N)
		if r.Density > 0 {
			what += fmt.Sprintf(" density %g", r.Density)
		}
		if r.Transport == "raw-tcp" {
			what += " (raw-tcp baseline)"
		}
		failed = append(failed, fmt.Sprintf("%s: %d wrong elements", what, *r.Wrong))
	}
	if len(failed) == 0 || rank != 0 {
		return nil
	}
	return fmt.Errorf("result check failed: %s", strings.Join(failed, "; "))
}

// progress shows "[i/total] op n=..." on a terminal, overwritten in place.
type progress struct {
	w     io.Writer
	total int
}

func (p progress) show(i int, op string, n int) {
	if p.w != nil {
		fmt.Fprintf(p.w, "\r\033[K[%d/%d] %s n=%d ...", i+1, p.total, op, n)
	}
}

func (p progress) clear() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count), 0 for none.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startCPUProfile writes a CPU profile of this rank to
// PREFIX.rank<R> with --cpuprofile PREFIX, for finding where a benchmark's
// time goes (go tool pprof bin/sparcml FILE), where its memory is
// allocated with --memprofile (go tool pprof -sample_index=alloc_space),
// and an execution trace, which shows every goroutine and thread wake-up,
// with --trace (go tool trace; the timed part of each iteration is a
// region, "sparcml" or "raw-tcp").
func startCPUProfile(cfg *benchConfig, rank int) (stop func(), err error) {
	if prefix := cfg.memProfile; prefix != "" {
		return func() {
			if f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, rank)); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}, nil
	}
	if prefix := cfg.execTrace; prefix != "" {
		return recordTo(prefix, rank, trace.Start, trace.Stop)
	}
	if prefix := cfg.cpuProfile; prefix != "" {
		return recordTo(prefix, rank, pprof.StartCPUProfile, pprof.StopCPUProfile)
	}
	return func() {}, nil
}

// recordTo starts a recording (a CPU profile, an execution trace) into
// the file prefix.rank<R> and returns what stops it and closes the file.
func recordTo(prefix string, rank int, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(fmt.Sprintf("%s.rank%d", prefix, rank))
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { stop(); f.Close() }, nil
}
