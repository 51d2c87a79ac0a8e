// Command benchtrain measures `sparcml train` on emulated clusters
// (test/cluster): the epoch time of sparse logistic regression with the
// exact sparse reduction against the dense allreduce, and the wall time at
// which top-k with error feedback reaches the dense run's final accuracy on
// the MLP. Each case brings a cluster up, runs one `sparcml train
// --compare` per round across its hosts (one rank per host; a comparison
// runs its variants one after another, so rounds alternate them; so do
// jobs separated by ';', for variants given different epochs), writes
// rank 0's JSON records with the cluster's settings added, and prints a
// Markdown summary. `make bench-train-cluster` runs it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sparcml/sparcml/test/cluster"
	"github.com/sparcml/sparcml/test/cluster/benchio"
)

type config struct {
	sparcml    string
	out        string
	md         string
	rounds     int
	logregHost int
	logregRate string
	logregArgs string
	mlpHosts   int
	mlpRate    string
	mlpArgs    string
	only       string
}

func main() {
	var c config
	flag.StringVar(&c.sparcml, "sparcml", "bin/sparcml", "the sparcml CLI")
	flag.StringVar(&c.out, "out", "bench/results/train-cluster.jsonl", "JSON lines written here")
	flag.StringVar(&c.md, "md", "bench/results/train-cluster.md", "Markdown summary written here")
	flag.IntVar(&c.rounds, "rounds", 2, "comparisons per case (the summary takes the median)")
	flag.IntVar(&c.logregHost, "logreg-hosts", 8, "hosts of the logistic-regression case")
	flag.StringVar(&c.logregRate, "logreg-rate", "1gbit", "link rate of the logistic-regression case (tc syntax)")
	flag.StringVar(&c.logregArgs, "logreg-args",
		"--model logreg --data synthetic:webspam --samples 8192 --epochs 1 --compare dense,sparse",
		"sparcml train arguments of the logistic-regression case")
	flag.IntVar(&c.mlpHosts, "mlp-hosts", 8, "hosts of the MLP case")
	flag.StringVar(&c.mlpRate, "mlp-rate", "25mbit", "link rate of the MLP case (tc syntax; docs/TRAINING.md says how the default was chosen)")
	flag.StringVar(&c.mlpArgs, "mlp-args",
		"--samples 12000 --epochs 2 --eval-every 0.25 --threads 1 --reduce dense; --samples 12000 --epochs 3 --eval-every 0.25 --threads 1 --reduce topk --density 0.01 --quant q4",
		"sparcml train arguments of the MLP case; jobs separated by ';' run one after another (the first is the reference)")
	flag.StringVar(&c.only, "only", "", "run one case: logreg|mlp")
	flag.Parse()
	if err := benchio.Abs(&c.sparcml, &c.out, &c.md); err != nil {
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
	fmt.Fprintln(os.Stderr, "benchtrain:", err)
	os.Exit(1)
}

// trainCase is one cluster and the comparison run on it.
type trainCase struct {
	name  string
	hosts int
	rate  string
	args  string
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
	cases := []trainCase{
		{"logreg", c.logregHost, c.logregRate, c.logregArgs},
		{"mlp", c.mlpHosts, c.mlpRate, c.mlpArgs},
	}
	var md strings.Builder
	var errs []error
	for _, tc := range cases {
		if c.only != "" && c.only != tc.name {
			continue
		}
		recs, err := runCase(c, f, tc)
		if err != nil {
			logf("FAILED: %s: %v", tc.name, err)
			errs = append(errs, err)
			continue
		}
		summarize(&md, tc, recs)
	}
	fmt.Print(md.String())
	if err := os.WriteFile(c.md, []byte(md.String()), 0o644); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// record is the part of `sparcml train --format json`'s records the
// summary reads, with the round added.
type record struct {
	Variant  string  `json:"variant"`
	Epoch    float64 `json:"epoch"`
	Accuracy float64 `json:"test_accuracy"`
	Loss     float64 `json:"test_loss"`
	TimeS    float64 `json:"time_s"`
	CommS    float64 `json:"comm_s"`
	Bytes    float64 `json:"bytes_sent_per_rank"`
	Round    int     `json:"round"`
}

func runCase(c config, w io.Writer, tc trainCase) ([]record, error) {
	cl, err := cluster.Up(cluster.Options{Hosts: tc.hosts, Rates: []string{tc.rate}, ProbeAdvisory: true})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	logf("%s: cluster %s, %d hosts at %s, probe host 0 -> 1 %.0f Mbit/s, load %s", tc.name, cl.ID, tc.hosts, tc.rate, cl.ProbeMbps, benchio.Load())
	var recs []record
	for round := 1; round <= c.rounds; round++ {
		for _, job := range strings.Split(tc.args, ";") {
			rs, err := runJob(c, w, cl, tc, round, strings.Fields(job))
			if err != nil {
				return nil, err
			}
			recs = append(recs, rs...)
		}
	}
	return recs, nil
}

// runJob runs one `sparcml train` across the cluster's hosts and emits
// rank 0's records.
func runJob(c config, w io.Writer, cl *cluster.Cluster, tc trainCase, round int, job []string) ([]record, error) {
	args := append([]string{c.sparcml, "train", "--format", "json"}, job...)
	logf("  round %d: %s", round, strings.Join(args[1:], " "))
	j, err := cl.Start(cluster.Job{Cmd: args})
	if err != nil {
		return nil, err
	}
	res, err := j.Wait(60 * time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, cluster.Describe(res))
	}
	for _, rr := range res {
		if rr.ExitCode != 0 {
			return nil, fmt.Errorf("sparcml train failed on rank %d:\n%s", rr.Rank, cluster.Describe(res))
		}
	}
	extra := map[string]any{"case": tc.name, "hosts": tc.hosts, "rate": tc.rate, "rate_mbps": cl.RateMbps(0),
		"probe_mbps": cl.ProbeMbps, "round": round, "load": benchio.Load()}
	return emit(w, res[0].Stdout, extra)
}

// emit writes every JSON record of stdout with extra added and returns
// them parsed.
func emit(w io.Writer, stdout string, extra map[string]any) ([]record, error) {
	lines, err := benchio.Append(w, stdout, extra)
	if err != nil {
		return nil, err
	}
	recs := make([]record, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal(l, &recs[i]); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// run1 is one variant's records of one round.
type run1 struct {
	variant string
	recs    []record
}

// byRound groups the records by round and variant, in order.
func byRound(recs []record) map[int][]run1 {
	out := map[int][]run1{}
	for _, r := range recs {
		runs := out[r.Round]
		if len(runs) == 0 || runs[len(runs)-1].variant != r.Variant || r.Epoch == 0 {
			runs = append(runs, run1{variant: r.Variant})
		}
		runs[len(runs)-1].recs = append(runs[len(runs)-1].recs, r)
		out[r.Round] = runs
	}
	return out
}

// reach is the training wall time of the first record after the start
// at or above acc, or -1.
func reach(rs []record, acc float64) float64 {
	for _, r := range rs {
		if r.Epoch > 0 && r.Accuracy >= acc {
			return r.TimeS
		}
	}
	return -1
}

// summarize writes, per round and variant, the final figures against the
// first variant's: time per epoch and its ratio, and the time at which
// each first reached the first variant's final accuracy and its ratio;
// then the medians of the ratios over the rounds.
func summarize(w io.Writer, tc trainCase, recs []record) {
	fmt.Fprintf(w, "\n### %s: %d hosts at %s\n\n`sparcml train %s`\n\n", tc.name, tc.hosts, tc.rate, tc.args)
	fmt.Fprintln(w, "| round | variant | epochs | test accuracy | test loss | time_s | comm_s | s/epoch | first's s/epoch over this | sent/rank | reaches first's final accuracy at | sooner |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	rounds := byRound(recs)
	keys := make([]int, 0, len(rounds))
	for k := range rounds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	epochRatio, reachRatio := map[string][]float64{}, map[string][]float64{}
	for _, k := range keys {
		runs := rounds[k]
		base := runs[0].recs[len(runs[0].recs)-1]
		baseReach := reach(runs[0].recs, base.Accuracy)
		for _, r := range runs {
			f := r.recs[len(r.recs)-1]
			perEpoch := f.TimeS / max(f.Epoch, 1e-9)
			er := base.TimeS / base.Epoch / perEpoch
			epochRatio[r.variant] = append(epochRatio[r.variant], er)
			t := reach(r.recs, base.Accuracy)
			reachS, sooner := "never", "-"
			if t >= 0 {
				reachS = fmt.Sprintf("%.1f s", t)
				if t > 0 {
					sooner = fmt.Sprintf("%.1fx", baseReach/t)
					reachRatio[r.variant] = append(reachRatio[r.variant], baseReach/t)
				}
			}
			fmt.Fprintf(w, "| %d | %s | %g | %.2f%% | %.4f | %.1f | %.1f | %.2f | %.1fx | %.1f MiB | %s | %s |\n",
				k, r.variant, f.Epoch, 100*f.Accuracy, f.Loss, f.TimeS, f.CommS, perEpoch, er, f.Bytes/(1<<20), reachS, sooner)
		}
	}
	fmt.Fprintln(w)
	for _, r := range rounds[keys[0]][1:] {
		fmt.Fprintf(w, "%s against %s, median over %d rounds: epoch time %.1fx shorter; first's final accuracy reached %s sooner\n\n",
			r.variant, rounds[keys[0]][0].variant, len(keys), benchio.Median(epochRatio[r.variant]), medianOrNever(reachRatio[r.variant], len(keys)))
	}
}

func medianOrNever(v []float64, rounds int) string {
	if len(v) < rounds {
		return fmt.Sprintf("(in %d of %d rounds) %.1fx", len(v), rounds, benchio.Median(v))
	}
	return fmt.Sprintf("%.1fx", benchio.Median(v))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchtrain: "+format+"\n", args...)
}
