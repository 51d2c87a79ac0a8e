// Command benchcluster measures sparcml against Open MPI on emulated
// clusters (test/cluster): for each link rate and host count it brings a
// cluster up, checks its links (a two-host stream, and every host streaming
// to the next at once), then runs the dense and sparse allreduce cases of
// `sparcml bench` and the Open MPI peers (bench/mpi) across the same hosts,
// alternating the two systems case by case (a sparse case's algorithms,
// auto among them, take turns iteration by iteration in one launch), and
// writes one JSON line per result. `make bench-cluster` runs it;
// test/cluster/plot turns the lines into a table and a plot.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparcml/sparcml/test/cluster"
	"github.com/sparcml/sparcml/test/cluster/benchio"
)

type config struct {
	hosts      []int
	rates      []string
	n          int
	densities  string
	iters      int
	warmup     int
	sparcml    string
	mpiDir     string
	out        string
	skipMPI    bool
	rounds     int
	denseAlgos []string
	sparseAlgo []string
	dists      []string
	quants     []string
	perHost    int
	indices    []string
}

func main() {
	var c config
	hosts := flag.String("hosts", "4,8", "host counts")
	rates := flag.String("rates", "1gbit,10gbit", "link rates (tc syntax)")
	flag.IntVar(&c.n, "n", 16<<20, "elements per vector")
	flag.StringVar(&c.densities, "densities", "0.001,0.01,0.1", "sparse densities")
	flag.IntVar(&c.iters, "iters", 5, "timed iterations per case")
	flag.IntVar(&c.warmup, "warmup", 1, "untimed iterations per case")
	flag.StringVar(&c.sparcml, "sparcml", "bin/sparcml", "the sparcml CLI")
	flag.StringVar(&c.mpiDir, "mpi", "bench/mpi", "directory of the built Open MPI peers (allreduce, sparse_allgatherv)")
	flag.StringVar(&c.out, "out", "bench/results/cluster.jsonl", "JSON lines written here")
	flag.BoolVar(&c.skipMPI, "no-mpi", false, "leave out the Open MPI peers")
	flag.IntVar(&c.perHost, "ranks-per-host", 1, "ranks on every host (more than one: shared memory within a host, the hierarchical algorithms)")
	flag.IntVar(&c.rounds, "rounds", 1, "times the whole list of cases runs on each cluster (the table takes the median)")
	dense := flag.String("dense-algos", "ring,rabenseifner,recursive-doubling,auto", "dense algorithms")
	sparse := flag.String("sparse-algos", "ssar-rd,ssar-split,dsar,allgather,auto,auto-tensor", "sparse algorithms (auto-tensor: auto on a named tensor, which reuses its counts exchange's decision)")
	dists := flag.String("dists", "uniform,powerlaw", "index distributions")
	quants := flag.String("quants", "none,q4", "value encodings of the sparse cases")
	indices := flag.String("indices", "auto", "index wires of the exact sparse cases (auto,raw,packed: sparcml bench --indices)")
	flag.Parse()
	var err error
	if c.hosts, err = ints(*hosts); err != nil {
		fail(err)
	}
	c.rates = strings.Split(*rates, ",")
	c.denseAlgos, c.sparseAlgo = split(*dense), split(*sparse)
	c.dists, c.quants, c.indices = split(*dists), split(*quants), split(*indices)
	if err := benchio.Abs(&c.sparcml, &c.mpiDir, &c.out); err != nil {
		fail(err)
	}
	if err := cluster.Unavailable(); err != nil {
		fail(err)
	}
	if err := run(c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchcluster:", err)
	os.Exit(1)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 2 {
			return nil, fmt.Errorf("bad host count %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func run(c config) error {
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(c.out)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	var errs []error
	for _, rate := range c.rates {
		for _, p := range c.hosts {
			if err := runSetting(c, f, p, rate); err != nil {
				logf("FAILED: %v", err)
				errs = append(errs, err)
			}
		}
	}
	logf("done in %v, results in %s", time.Since(start).Round(time.Second), c.out)
	return errors.Join(errs...)
}

// setting is what every line of one cluster carries: the cluster and its
// measured links.
type setting struct {
	Hosts       int     `json:"hosts"`
	PerHost     int     `json:"ranks_per_host"`
	Rate        string  `json:"rate"`
	RateMbps    float64 `json:"rate_mbps"`
	ProbeMbps   float64 `json:"probe_mbps"`
	ProbeOK     bool    `json:"probe_ok"`
	RingMbpsMin float64 `json:"ring_probe_mbps_min"`
	RingMbpsMed float64 `json:"ring_probe_mbps_median"`
	MTU         int     `json:"mtu"`
	Commit      string  `json:"commit,omitempty"`
	CPUs        int     `json:"cpus"`
}

func runSetting(c config, w io.Writer, p int, rate string) error {
	t0 := time.Now()
	cl, err := cluster.Up(cluster.Options{Hosts: p, Rates: []string{rate}, ProbeAdvisory: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	s := setting{Hosts: p, PerHost: c.perHost, Rate: rate, RateMbps: cl.RateMbps(0), ProbeMbps: cl.ProbeMbps, ProbeOK: cl.ProbeErr == nil,
		MTU: cl.MTU, Commit: benchio.Commit(), CPUs: runtime.NumCPU()}
	ring, err := cl.ProbeRing(3)
	if err != nil {
		return err
	}
	s.RingMbpsMin, s.RingMbpsMed = slices.Min(ring), benchio.Median(ring)
	logf("cluster %s: %d hosts at %s; probe host 0 -> 1 %.0f Mbit/s (within 5%%: %v), every host at once %.0f..%.0f Mbit/s; load %s",
		cl.ID, p, rate, s.ProbeMbps, s.ProbeOK, s.RingMbpsMin, slices.Max(ring), benchio.Load())
	emit := func(row map[string]any) error {
		b, _ := json.Marshal(s)
		var base map[string]any
		json.Unmarshal(b, &base)
		for k, v := range row {
			base[k] = v
		}
		base["load"] = benchio.Load() // the 1-minute load average after the case
		line, err := json.Marshal(base)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	r := &runner{c: c, cl: cl, emit: emit}
	for round := 1; round <= c.rounds; round++ {
		r.round = round
		r.cases()
	}
	logf("cluster %s done in %v", cl.ID, time.Since(t0).Round(time.Second))
	if r.failed > 0 {
		return fmt.Errorf("%d cases failed on %d hosts at %s (see above)", r.failed, p, rate)
	}
	return nil
}

type runner struct {
	c      config
	cl     *cluster.Cluster
	emit   func(map[string]any) error
	failed int
	round  int
}

// cases runs every case once on the cluster, alternating the two systems:
// Open MPI's allreduce, then each of ours; by distribution, the Allgatherv
// peer, then ours.
func (r *runner) cases() {
	if !r.c.skipMPI {
		r.note(r.mpiAllreduce())
	}
	for _, algo := range r.c.denseAlgos {
		r.note(r.sparcml(map[string]any{"system": "sparcml"}, "--op", "allreduce", "--algo", algo, "--sizes", strconv.Itoa(r.c.n)))
	}
	for _, dist := range r.c.dists {
		if !r.c.skipMPI {
			for _, d := range strings.Split(r.c.densities, ",") {
				r.note(r.mpiAllgatherv(d, dist))
			}
		}
		for _, quant := range r.c.quants {
			algos := slices.DeleteFunc(slices.Clone(r.c.sparseAlgo), func(a string) bool {
				return a == "ssar-rd" && quant != "none" // refused by design: it would re-quantize partial sums every round
			})
			for _, idx := range r.c.indices {
				if idx != "auto" && quant != "none" {
					continue // lossy codecs always pack their indices
				}
				extra := map[string]any{"system": "sparcml", "dist": dist, "quant": quant}
				if idx != "auto" {
					extra["indices_forced"] = idx
				}
				// One launch for all the algorithms, which take turns
				// iteration by iteration: auto and the forced ones are
				// timed side by side under the same load.
				r.note(r.sparcml(extra, "--op", "sparse-allreduce", "--algo", strings.Join(algos, ","), "--dist", dist, "--quant", quant,
					"--indices", idx, "--sizes", strconv.Itoa(r.c.n), "--density", r.c.densities))
			}
		}
	}
}

// note reports a failed case and goes on with the others, so that one
// failure does not throw away a long run.
func (r *runner) note(err error) {
	if err != nil {
		r.failed++
		logf("FAILED: %v", err)
	}
}

// sparcml runs one `sparcml bench` across the hosts (-ranks-per-host on each)
// and emits rank 0's rows with extra added.
func (r *runner) sparcml(extra map[string]any, args ...string) error {
	args = append([]string{r.c.sparcml, "bench", "--format", "json", "--iters", strconv.Itoa(r.c.iters),
		"--warmup", strconv.Itoa(r.c.warmup)}, args...)
	logf("  %s", strings.Join(args[1:], " "))
	j, err := r.cl.Start(cluster.Job{Cmd: args, RanksPerHost: r.c.perHost})
	if err != nil {
		return err
	}
	res, err := j.Wait(20 * time.Minute)
	if err != nil {
		return fmt.Errorf("%v\n%s", err, cluster.Describe(res))
	}
	for _, rr := range res {
		if rr.ExitCode != 0 {
			return fmt.Errorf("sparcml bench failed on rank %d:\n%s", rr.Rank, cluster.Describe(res))
		}
	}
	return r.emitLines(res[0].Stdout, extra)
}

func (r *runner) emitLines(stdout string, extra map[string]any) error {
	rows, err := benchio.Rows(stdout)
	if err != nil {
		return err
	}
	for _, row := range rows {
		for k, v := range extra {
			row[k] = v
		}
		row["round"] = r.round
		if err := r.emit(row); err != nil {
			return err
		}
	}
	return nil
}

// mpiArgs: Open MPI polls for progress; with more ranks than cores it is
// told to yield the CPU while it waits, as its documentation advises for
// oversubscribed nodes.
var mpiArgs = []string{"--mca", "mpi_yield_when_idle", "1"}

func (r *runner) mpiAllreduce() error {
	prog := filepath.Join(r.c.mpiDir, "allreduce")
	logf("  mpirun allreduce %d", r.c.n)
	out, err := r.cl.MPIRun(20*time.Minute, r.c.perHost, mpiArgs, prog, strconv.Itoa(r.c.n), strconv.Itoa(r.c.iters), strconv.Itoa(r.c.warmup))
	if err != nil {
		return err
	}
	return r.emitLines(out, map[string]any{"system": "openmpi", "algo": "MPI_Allreduce"})
}

func (r *runner) mpiAllgatherv(density, dist string) error {
	prog := filepath.Join(r.c.mpiDir, "sparse_allgatherv")
	logf("  mpirun sparse_allgatherv %d %s %s", r.c.n, density, dist)
	out, err := r.cl.MPIRun(20*time.Minute, r.c.perHost, mpiArgs, prog, strconv.Itoa(r.c.n), density,
		strconv.Itoa(r.c.iters), strconv.Itoa(r.c.warmup), dist)
	if err != nil {
		return err
	}
	return r.emitLines(out, map[string]any{"system": "openmpi", "algo": "MPI_Allgatherv", "dist": dist, "quant": "none"})
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchcluster: "+format+"\n", args...)
}
