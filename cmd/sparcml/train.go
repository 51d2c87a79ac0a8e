package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/launch"
	"github.com/sparcml/sparcml/train"
	"github.com/sparcml/sparcml/train/plot"
)

const trainUsage = `usage: sparcml train [-n N] [--model mlp|logreg] [--data D] [--reduce dense|sparse|topk] [flags]

Data-parallel training: every rank reads its shard of the data, computes
the gradient of its part of each mini-batch, and the ranks average the
gradients (dense allreduce, exact sparse allreduce, or top-k with error
feedback) before the same SGD step. Prints per evaluation the train and
test loss, test accuracy, wall time split into compute and communication
and bytes sent per rank. Without -n it joins the job its environment
describes (sparcml run, srun, mpirun, torchrun). docs/TRAINING.md has the
details.

flags:`

// trainFlags is the parsed command line of `sparcml train`.
type trainFlags struct {
	cfg       train.Config
	variants  []train.Variant
	n         int
	bindTo    string
	format    string
	transport string
	save      string
	plot      string
	progress  progressFlag
	args      []string
}

// trainFlagValues holds the flags that parseTrainFlags turns into
// fields of trainFlags.
type trainFlagValues struct {
	hidden, reduce, density, quant, compare, scope string
	noEF, noMask, perLayer                         bool
}

// newTrainFlags declares every flag of `sparcml train` once, with its
// default.
func newTrainFlags(f *trainFlags, v *trainFlagValues) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &f.cfg
	fs.IntVar(&f.n, "n", 0, "launch N local ranks (without -n: join the job described by the environment)")
	fs.StringVar(&f.bindTo, "bind-to", "none", "with -n: core binds rank r to one CPU, none leaves placement to the kernel")
	fs.StringVar(&c.Model, "model", "mlp", "model: mlp|logreg")
	fs.StringVar(&v.hidden, "hidden", "1024,256", "mlp: hidden layer sizes")
	fs.StringVar(&c.Data, "data", "", "training data: fashion-mnist|synthetic:url|synthetic:webspam|FILE[.gz|.bz2] (LIBSVM) (default fashion-mnist for mlp, synthetic:url for logreg)")
	fs.StringVar(&c.Test, "test", "", "LIBSVM test file (default: a seeded 10% of --data held out)")
	fs.IntVar(&c.Dim, "dim", 0, "LIBSVM: declared number of features (default: the largest index); synthetic: the dimension")
	fs.IntVar(&c.Classes, "classes", 0, "declared number of classes (default: from the labels)")
	fs.IntVar(&c.Samples, "samples", 0, "use about N training samples (synthetic: generate N; default all, or the generator's size)")
	fs.IntVar(&c.NNZ, "nnz", 0, "synthetic: nonzeros per sample (default 100 for url, 400 for webspam)")
	fs.IntVar(&c.Epochs, "epochs", 0, "epochs (default 10 for mlp, 5 for logreg; 0 with --load: evaluate only)")
	fs.IntVar(&c.Batch, "batch", 0, "per-rank mini-batch (default 64 for mlp, 32 for logreg)")
	fs.Float64Var(&c.LR, "lr", 0, "learning rate (default 0.05 for mlp, 10 for logreg)")
	fs.Float64Var(&c.Momentum, "momentum", -1, "SGD momentum (default 0.9 for mlp, 0 for logreg)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0, "L2 weight decay")
	fs.StringVar(&c.Schedule, "schedule", "cosine", "learning-rate schedule: cosine|step|const")
	fs.Float64Var(&c.EvalEvery, "eval-every", 1, "epochs between evaluations (e.g. 0.25)")
	fs.StringVar(&c.OnFailure, "on-failure", "abort", "when a rank is lost: abort the job, or shrink: the survivors go on from the last step all of them completed, with the data re-sharded among them (TCP; sets SPARCML_ON_PEER_LOSS=revoke)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the initialization, the shuffles, the split and the generator")
	fs.IntVar(&c.Threads, "threads", 0, "goroutines per rank for the mlp's products (default: CPUs / ranks on this host)")
	fs.StringVar(&v.reduce, "reduce", "dense", "gradient reduction: dense|sparse|topk")
	fs.StringVar(&v.density, "density", "0.01", "topk: fraction of the gradient sent, e.g. 0.01 or 1%")
	fs.StringVar(&v.quant, "quant", "none", "value encoding of the reduction: none|fp16|bf16|q8|q4|q2")
	fs.StringVar(&c.Select, "select", "exact", "topk: selection exact|sampled|reuse|random (random-k, for comparison)")
	fs.Float64Var(&c.WarmupEpochs, "warmup-epochs", 0, "topk: epochs of density warm-up (from 25% down to --density)")
	fs.IntVar(&c.GlobalPeriod, "global-period", 0, "topk with the global scope: steps an exact global threshold serves, the ones between estimating it (0: the library's default)")
	fs.Float64Var(&c.GlobalWarmupEpochs, "global-warmup-epochs", 0, "topk with the global scope: epochs over which the count kept falls from P times --density to --density (each rank still sends its --density)")
	fs.BoolVar(&v.noEF, "no-error-feedback", false, "topk: drop what is not sent (the ablation)")
	fs.BoolVar(&v.noMask, "no-momentum-masking", false, "topk: keep the velocity of the entries sent (no DGC momentum-factor masking)")
	fs.StringVar(&v.scope, "scope", "union", "topk: union sums every rank's selection exactly; global keeps about --density of those sums, the largest over every rank (Ok-Topk's global top-k; lossy)")
	fs.BoolVar(&v.perLayer, "per-layer", false, "topk: select the top entries of every tensor separately (default: over the whole model)")
	fs.StringVar(&v.compare, "compare", "", "run these variants one after another on the same data and seed, e.g. dense,topk:0.01,topk:0.01+q4")
	fs.StringVar(&f.plot, "plot", "", "draw test accuracy and loss against epochs and wall time to FILE.png")
	fs.StringVar(&f.save, "save", "", "write the final model to FILE.npz (float32 w0, b0, w1, b1, ...; w_i of shape [inputs, outputs])")
	fs.StringVar(&c.Load, "load", "", "start from the model in FILE.npz")
	fs.StringVar(&f.format, "format", "table", "output: table|json (one JSON object per evaluation)")
	fs.StringVar(&f.transport, "transport", "", "transport: auto|shm|tcp|rdma (default: SPARCML_TRANSPORT, else auto: shared memory within a host, RDMA or TCP between hosts)")
	fs.Var(&f.progress, "progress", progressUsage)
	return fs
}

func parseTrainFlags(args []string) (*trainFlags, error) {
	f := &trainFlags{args: args}
	c := &f.cfg
	var v trainFlagValues
	fs := newTrainFlags(f, &v)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, errHelp
		}
		return nil, usagef("%v (see sparcml train -h)", err)
	}
	epochsSet := false
	fs.Visit(func(fl *flag.Flag) { epochsSet = epochsSet || fl.Name == "epochs" })
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	if c.Epochs == 0 && epochsSet {
		if c.Load == "" {
			return nil, usagef("--epochs 0 evaluates a model given with --load")
		}
		c.Epochs = -1 // evaluate only, kept past Defaults below
	}
	for _, h := range strings.Split(v.hidden, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(h))
		if err != nil || size < 1 {
			return nil, usagef("--hidden %q: want sizes like 1024,256", v.hidden)
		}
		c.Hidden = append(c.Hidden, size)
	}
	if c.Model != "mlp" {
		c.Hidden = nil
	}
	c.ErrorFeedback = !v.noEF
	if v.compare != "" {
		for _, s := range strings.Split(v.compare, ",") {
			variant, err := train.ParseVariant(s)
			if err != nil {
				return nil, usagef("--compare: %v", err)
			}
			f.variants = append(f.variants, variant)
		}
	} else {
		variant := train.Variant{Reduce: v.reduce, NoEF: v.noEF, NoMask: v.noMask, PerLayer: v.perLayer}
		if v.reduce != "dense" && v.reduce != "sparse" && v.reduce != "topk" {
			return nil, usagef("unknown --reduce %q (want dense|sparse|topk)", v.reduce)
		}
		scope, err := compress.ParseScope(v.scope)
		if err != nil || scope != compress.ScopeUnion && v.reduce != "topk" {
			return nil, usagef("--scope %q: want union or global, global with --reduce topk", v.scope)
		}
		variant.Scope = scope
		if v.reduce == "topk" {
			d, err := train.ParseFraction(v.density)
			if err != nil {
				return nil, usagef("--density: %v", err)
			}
			variant.Density = d
		}
		q, err := sparcml.ParseQuant(v.quant)
		if err != nil {
			return nil, usagef("--quant: %v", err)
		}
		variant.Quant = q
		f.variants = []train.Variant{variant}
	}
	for _, v := range f.variants {
		if v.Reduce == "sparse" && c.Model == "mlp" {
			return nil, usagef("--reduce sparse needs a gradient sparse by nature (--model logreg); the mlp's is dense: use dense or topk")
		}
	}
	if f.format != "table" && f.format != "json" {
		return nil, usagef("unknown --format %q (want table|json)", f.format)
	}
	if _, err := parseBindTo(f.bindTo); err != nil {
		return nil, err
	}
	evalOnly := c.Epochs < 0
	c.Defaults()
	if evalOnly {
		c.Epochs = 0
	}
	if err := c.Check(); err != nil {
		return nil, usageError{err}
	}
	return f, nil
}

func trainCmd(args []string) error {
	f, err := parseTrainFlags(args)
	if err == errHelp {
		fmt.Println(trainUsage)
		printFlags(os.Stdout, newTrainFlags(&trainFlags{}, &trainFlagValues{}), nil)
		return nil
	}
	if err != nil {
		return err
	}
	env, err := config.Load(os.Getenv)
	if err != nil {
		return err
	}
	if f.n > 0 {
		return relaunchSelf(relaunchJob{sub: "train", args: f.args, n: f.n, progress: f.progress.show(), bindTo: f.bindTo, token: env.Token, keepGoing: f.cfg.OnFailure == "shrink"})
	}
	if f.cfg.Threads == 0 {
		f.cfg.Threads = defaultThreads(env.LocalSize)
	}
	ctx := context.Background()
	opts := []sparcml.Option{sparcml.WithTransport(f.transport)}
	if f.cfg.OnFailure == "shrink" {
		opts = append(opts, sparcml.WithOnPeerLoss("revoke"))
	}
	comm, err := sparcml.Init(ctx, opts...)
	if err != nil {
		return err
	}
	err = runTraining(ctx, comm, f)
	if err != nil {
		// Say it before Close: Close waits for every rank, so each has
		// printed the error before the launcher stops the others.
		fmt.Fprintf(os.Stderr, "sparcml train: rank %d of %d: %v\n", comm.Rank(), comm.Size(), err)
		comm.Close()
		return &launch.RankError{Rank: comm.Rank(), Err: err, Code: 1}
	}
	return comm.Close()
}

// defaultThreads shares this host's CPUs among its ranks, as the
// launchers tell how many there are (sparcml's own, else torchrun's,
// mpirun's or srun's variable).
func defaultThreads(localSize int) int {
	local := 1
	if localSize > 0 {
		local = localSize
	} else {
		for _, v := range []string{"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"} {
			if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
				local = n
				break
			}
		}
	}
	return max(1, runtime.NumCPU()/local)
}

func runTraining(ctx context.Context, comm *sparcml.Comm, f *trainFlags) error {
	cfg := &f.cfg
	trainSet, testSet, err := train.Load(ctx, comm, cfg)
	if err != nil {
		return err
	}
	root := comm.Rank() == 0
	out := train.NewReporter(io.Discard, f.format)
	if root {
		out = train.NewReporter(os.Stdout, f.format)
	}
	job := &train.Job{Comm: comm, Cfg: cfg, Train: trainSet, Test: testSet}
	job.Shrunk = func(c *sparcml.Comm, lost []int, step int) {
		if c.Rank() == 0 && !root {
			root, out = true, train.NewReporter(os.Stdout, f.format) // rank 0 was lost
		}
		fmt.Fprintf(os.Stderr, "sparcml train: rank %d: lost rank(s) %v; going on as rank %d of %d from step %d, the data re-sharded among the survivors\n",
			comm.Rank(), lost, c.Rank(), c.Size(), step)
		comm = c
	}
	var bar *train.Progress
	if root && f.progress.show() {
		bar = &train.Progress{W: os.Stderr}
		job.Progress = bar.Show
	}
	out.Note("data %s: %d training and %d test samples on rank 0 of %d (%s in memory, %d values stored), %d features, %d classes",
		cfg.Data, trainSet.Len(), testSet.Len(), comm.Size(), train.Bytes(float64(trainSet.Bytes()+testSet.Bytes())), trainSet.NNZ()+testSet.NNZ(), trainSet.Dim, max(trainSet.Classes, testSet.Classes))
	out.Note("per-rank batch %d (global %d), lr %g %s, momentum %g, weight decay %g, %d epochs, seed %d, %d threads per rank",
		cfg.Batch, cfg.Batch*comm.Size(), cfg.LR, cfg.Schedule, cfg.Momentum, cfg.WeightDecay, cfg.Epochs, cfg.Seed, cfg.Threads)
	var results []*train.Result
	for i, v := range f.variants {
		if bar != nil {
			bar.Label = v.Name()
		}
		report := func(rec train.Record) {
			if bar != nil {
				bar.Clear()
			}
			out.Record(rec)
		}
		res, err := job.Run(ctx, v, report)
		if bar != nil {
			bar.Clear()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name(), err)
		}
		if i == 0 {
			out.Note("model %s", res.Model.Describe())
		}
		results = append(results, res)
	}
	out.Summary(results)
	var errs []error
	if root && f.save != "" {
		errs = append(errs, saveModels(f, results, out))
	}
	if root && f.plot != "" {
		if err := plot.Training(f.plot, plotTitle(cfg, job.Comm.Size()), results); err != nil {
			errs = append(errs, fmt.Errorf("plot: %w", err))
		} else {
			out.Note("plot written to %s", f.plot)
		}
	}
	return train.Agree(ctx, job.Comm, errors.Join(errs...))
}

func plotTitle(cfg *train.Config, np int) string {
	return fmt.Sprintf("%s on %s, %d ranks, batch %d per rank", cfg.Model, cfg.Data, np, cfg.Batch)
}

// saveModels writes each run's model: FILE for one run, FILE with the
// variant's name before the extension for a comparison.
func saveModels(f *trainFlags, results []*train.Result, out *train.Reporter) error {
	for _, res := range results {
		path := f.save
		if len(results) > 1 {
			name := strings.NewReplacer(":", "_", "+", "_", "%", "pct").Replace(res.Variant.Name())
			path = strings.TrimSuffix(f.save, ".npz") + "-" + name + ".npz"
		}
		if err := train.SaveNPZ(path, res.Model); err != nil {
			return err
		}
		out.Note("model saved to %s (%s)", path, train.InputNote(f.cfg.Data))
	}
	return nil
}
