// Command benchtorch measures the PyTorch backend "sparcml" against gloo:
// python/tools/backend_bench.py (dense all_reduce against gloo and against
// `sparcml bench` of the same operation, the sparse embedding gradient,
// the cost of a small call) and python/tools/overlap_bench.py (a DDP step
// with the asynchronous allreduce_hook against compute and communication
// alone). Each case runs one job in which the variants alternate round by
// round; a cluster case brings up an emulated cluster (test/cluster)
// under /tmp/sparcml-cluster.lock, held for that case only, and the
// "local" case runs the ranks on this host with `sparcml run`. Rank 0's
// JSON lines are appended to -out with the case's settings, the cluster's
// probe figure and the load added. `make bench-torch-cluster` runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/test/cluster"
	"github.com/sparcml/sparcml/test/cluster/benchio"
)

type config struct {
	sparcml, python, pythonPath string
	out                         string
	only                        string
	rounds                      int
	lock                        string
	backendCases                string // backend_bench.py's --cases for local and dense, if not ""
	label                       string
	bucketCapMB                 string // overlap_bench.py's --bucket-cap-mb, if not ""
}

// benchCase is one job: its ranks (hosts = 0: np ranks on this host) and
// the Python benchmark with its arguments.
type benchCase struct {
	name  string
	hosts int // 0: local
	np    int
	rate  string
	tool  string
	args  []string
}

func main() {
	var c config
	flag.StringVar(&c.sparcml, "sparcml", "bin/sparcml", "the sparcml CLI")
	flag.StringVar(&c.python, "python", ".venv/bin/python", "the Python with torch")
	flag.StringVar(&c.pythonPath, "pythonpath", "python", "PYTHONPATH of the ranks (the sparcml package)")
	flag.StringVar(&c.out, "out", "bench/results/torch-cluster.jsonl", "JSON lines appended here")
	flag.StringVar(&c.only, "only", "", "comma list of cases to run: local,dense,overlap (default all)")
	flag.IntVar(&c.rounds, "rounds", 5, "rounds of every case (the variants alternate within each)")
	flag.StringVar(&c.lock, "lock", "/tmp/sparcml-cluster.lock", "lock held while a cluster case runs")
	flag.StringVar(&c.backendCases, "backend-cases", "", "backend_bench.py's --cases for local and dense (default: dense,bench,small and dense,bench,sparse,small), e.g. small")
	flag.StringVar(&c.bucketCapMB, "bucket-cap-mb", "", "overlap_bench.py's --bucket-cap-mb (default: the tool's), e.g. 0,4 for DDP's default buckets beside 4 MiB ones")
	flag.StringVar(&c.label, "label", "", "added to every row as \"label\" (what the tree holds, e.g. the branches merged)")
	flag.Parse()
	if err := benchio.Abs(&c.sparcml, &c.python, &c.pythonPath, &c.out); err != nil {
		fail(err)
	}
	if err := run(c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchtorch:", err)
	os.Exit(1)
}

func cases(c config) []benchCase {
	rounds := fmt.Sprint(c.rounds)
	backend := filepath.Join(filepath.Dir(c.pythonPath), "python", "tools", "backend_bench.py")
	overlap := filepath.Join(filepath.Dir(c.pythonPath), "python", "tools", "overlap_bench.py")
	overlapArgs := []string{"--rounds", rounds}
	if c.bucketCapMB != "" {
		overlapArgs = append(overlapArgs, "--bucket-cap-mb", c.bucketCapMB)
	}
	localCases, denseCases := "dense,bench,small", "dense,bench,sparse,small"
	if c.backendCases != "" {
		localCases, denseCases = c.backendCases, c.backendCases
	}
	return []benchCase{
		{"local", 0, 4, "", backend, []string{"--cases", localCases, "--rounds", rounds,
			"--sparcml-bench", c.sparcml, "--bench-algos", "auto,ring"}},
		{"dense", 8, 8, "1gbit", backend, []string{"--cases", denseCases, "--rounds", rounds,
			"--sparcml-bench", c.sparcml, "--bench-algos", "auto,ring"}},
		{"overlap", 4, 4, "1gbit", overlap, overlapArgs},
	}
}

func run(c config) error {
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(c.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	for _, bc := range cases(c) {
		if c.only != "" && !strings.Contains(","+c.only+",", ","+bc.name+",") {
			continue
		}
		var err error
		if bc.hosts == 0 {
			err = runLocal(c, f, bc)
		} else {
			err = withLock(c.lock, func() error { return runCluster(c, f, bc) })
		}
		if err != nil {
			logf("FAILED: %s: %v", bc.name, err)
			errs = append(errs, fmt.Errorf("%s: %w", bc.name, err))
		}
	}
	return errors.Join(errs...)
}

// withLock runs fn holding an exclusive flock on path, the lock every user
// of the shared emulated cluster takes.
func withLock(path string, fn func() error) error {
	l, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("flock %s: %w", path, err)
	}
	defer syscall.Flock(int(l.Fd()), syscall.LOCK_UN)
	return fn()
}

func runLocal(c config, w io.Writer, bc benchCase) error {
	args := append([]string{"run", "-n", fmt.Sprint(bc.np), "--no-prefix", "--", c.python, bc.tool}, bc.args...)
	logf("%s: %d ranks on this host, load %s: sparcml %s", bc.name, bc.np, benchio.Load(), strings.Join(args, " "))
	cmd := exec.Command(c.sparcml, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+c.pythonPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return emit(w, string(out), map[string]any{"bench": bc.name, "hosts": 1, "load": benchio.Load(), "commit": benchio.Commit(), "label": c.label})
}

func runCluster(c config, w io.Writer, bc benchCase) error {
	cl, err := cluster.Up(cluster.Options{Hosts: bc.hosts, Rates: []string{bc.rate}, ProbeAdvisory: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	logf("%s: cluster %s, %d hosts at %s, probe host 0 -> 1 %.0f Mbit/s, load %s", bc.name, cl.ID, bc.hosts, bc.rate, cl.ProbeMbps, benchio.Load())
	cmd := append([]string{c.python, bc.tool}, bc.args...)
	logf("  %s", strings.Join(cmd, " "))
	j, err := cl.Start(cluster.Job{Cmd: cmd, Env: []string{"PYTHONPATH=" + c.pythonPath, "GLOO_SOCKET_IFNAME=" + cluster.IfName(0)}})
	if err != nil {
		return err
	}
	res, err := j.Wait(30 * time.Minute)
	if err != nil {
		return fmt.Errorf("%v\n%s", err, cluster.Describe(res))
	}
	for _, r := range res {
		if r.ExitCode != 0 {
			return fmt.Errorf("rank %d failed:\n%s", r.Rank, cluster.Describe(res))
		}
	}
	return emit(w, res[0].Stdout, map[string]any{"bench": bc.name, "hosts": bc.hosts, "rate": bc.rate,
		"rate_mbps": cl.RateMbps(0), "probe_mbps": cl.ProbeMbps, "load": benchio.Load(), "commit": benchio.Commit(), "label": c.label})
}

// emit appends every JSON row of stdout with extra added, and prints it.
func emit(w io.Writer, stdout string, extra map[string]any) error {
	lines, err := benchio.Append(w, stdout, extra)
	for _, l := range lines {
		os.Stdout.Write(l)
	}
	return err
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchtorch: "+format+"\n", args...)
}
