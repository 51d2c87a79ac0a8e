package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/train/data"
	"github.com/sparcml/sparcml/train/model"
)

// Job is one rank's part of a training job: its communicator, the
// configuration and its shards of the data, loaded once and shared by
// the variants of a comparison.
type Job struct {
	Comm        *sparcml.Comm
	Cfg         *Config
	Train, Test *data.Set

	// Progress, when set, is called after every step with the steps done
	// and the total of the current run.
	Progress func(done, total int)

	// Shrunk, when set, is told when the job goes on without a lost
	// rank (Cfg.OnFailure "shrink").
	Shrunk Shrunk
}

// Record is one evaluation: where the training is, the losses and
// accuracy, and the time and bytes spent so far. Times are averages over
// the ranks, bytes the gradient reductions' payload and headers sent per
// rank, averaged over the ranks. It also carries the settings that the
// variant's name does not (seed, batch, momentum, and top-k's selection
// and warm-up), so that a file of records says how it was made.
type Record struct {
	Variant      string   `json:"variant"`
	Epoch        float64  `json:"epoch"`
	Step         int      `json:"step"`
	TrainLoss    *float64 `json:"train_loss"` // null before the first step
	TestLoss     float64  `json:"test_loss"`
	TestAccuracy float64  `json:"test_accuracy"`
	TimeS        float64  `json:"time_s"`
	CommS        float64  `json:"comm_s"`
	ComputeS     float64  `json:"compute_s"`
	EvalS        float64  `json:"eval_s"`
	BytesSent    float64  `json:"bytes_sent_per_rank"`
	Reduce       string   `json:"reduce"`
	Density      float64  `json:"density"`
	Quant        string   `json:"quant"`
	NP           int      `json:"np"`
	LR           float64  `json:"lr"`
	Model        string   `json:"model"`
	Data         string   `json:"data"`
	Seed         uint64   `json:"seed"`
	Batch        int      `json:"batch"`    // per rank
	Momentum     float64  `json:"momentum"` // SGD's
	Select       string   `json:"select,omitempty"`
	WarmupEpochs float64  `json:"warmup_epochs,omitempty"`
	// The global scope's, if set.
	GlobalPeriod       int     `json:"global_period,omitempty"`
	GlobalWarmupEpochs float64 `json:"global_warmup_epochs,omitempty"`
}

// Result is a finished run: its evaluations and the trained model.
type Result struct {
	Variant Variant
	Records []Record
	Model   model.Model
}

// Final is the last evaluation.
func (r *Result) Final() Record { return r.Records[len(r.Records)-1] }

// NewModel builds the configured model for the job's data, or loads it
// from Cfg.Load, and checks that it fits the data.
func (j *Job) NewModel() (model.Model, error) {
	c, s := j.Cfg, j.Train
	classes := max(s.Classes, j.Test.Classes, 2)
	var m model.Model
	switch c.Model {
	case "mlp":
		sizes := append(append([]int{s.Dim}, c.Hidden...), classes)
		if first := int64(s.Dim) * int64(sizes[1]); first > maxParams {
			return nil, fmt.Errorf("model does not fit the data: an mlp input layer of %d features x %d units is %d parameters (the limit is %d); use --model logreg for data of this dimension", s.Dim, sizes[1], first, maxParams)
		}
		mlp, err := model.NewMLP(sizes, c.Seed, model.NewWorkers(c.Threads))
		if err != nil {
			return nil, err
		}
		m = mlp
	case "logreg":
		if int64(s.Dim)*int64(classes) > maxParams*4 {
			return nil, fmt.Errorf("model does not fit the data: logreg over %d features and %d classes is too large", s.Dim, classes)
		}
		lr, err := model.NewLogReg(s.Dim, classes)
		if err != nil {
			return nil, err
		}
		m = lr
	default:
		return nil, fmt.Errorf("unknown model %q", c.Model)
	}
	if c.Load != "" {
		if err := LoadNPZ(c.Load, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// maxParams bounds the input layer of an mlp (a gigabyte of float32).
const maxParams = 1 << 28

// Run trains a fresh model (NewModel) with variant v, calling report
// with every evaluation on every rank: before the first step, every
// Cfg.EvalEvery epochs and after the last step.
func (j *Job) Run(ctx context.Context, v Variant, report func(Record)) (*Result, error) {
	m, err := j.NewModel()
	if err := Agree(ctx, j.Comm, err); err != nil {
		return nil, err
	}
	red, err := newReducer(j.Comm, v, m, j.Cfg)
	if err := Agree(ctx, j.Comm, err); err != nil {
		return nil, err
	}
	r := &run{job: j, v: v, m: m, red: red, report: report, res: &Result{Variant: v, Model: m}}
	if err := r.train(ctx); err != nil {
		return nil, err
	}
	return r.res, nil
}

// run is the state of one training run on this rank.
type run struct {
	job    *Job
	v      Variant
	m      model.Model
	red    Reducer
	report func(Record)
	res    *Result

	opt   sgd
	sched schedule

	grad       []float32
	sg, avg    sparcml.SparseVector[float32]
	lossSum    float64
	lossSteps  int
	compute    time.Duration
	comm       time.Duration
	evalTime   time.Duration
	bytes      uint64
	start      time.Time
	steps      int // per epoch
	totalSteps int

	kept, prev snapshot // before the current and the previous step (survive.go)
}

func (r *run) train(ctx context.Context) error {
	c := r.job.Cfg
	n, err := allreduceMin(ctx, r.job.Comm, r.job.Train.Len())
	if err != nil {
		return err
	}
	r.steps = n / c.Batch
	if c.Epochs > 0 && r.steps < 1 {
		return fmt.Errorf("the smallest shard holds %d samples, fewer than the batch of %d", n, c.Batch)
	}
	r.totalSteps = r.steps * c.Epochs
	evalSteps := max(1, int(math.Round(c.EvalEvery*float64(r.steps))))
	r.opt = sgd{momentum: c.Momentum, decay: c.WeightDecay}
	if mr, ok := r.red.(Momentum); ok && mr.AppliesMomentum() {
		r.opt.momentum = 0
	}
	r.sched = schedule{kind: c.Schedule, lr: c.LR, epochs: float64(c.Epochs)}
	r.grad = make([]float32, len(r.m.Params()))
	r.start = time.Now()
	if err := r.evaluate(ctx, 0); err != nil {
		return err
	}
	var order []int
	orderEpoch := -1
	for step := 0; step < r.totalSteps; {
		epoch, s := step/r.steps, step%r.steps
		if epoch != orderEpoch || len(order) != r.job.Train.Len() {
			order = make([]int, r.job.Train.Len())
			r.shuffle(order, epoch)
			orderEpoch = epoch
		}
		r.keep()
		if err := r.step(ctx, step, order[s*c.Batch:(s+1)*c.Batch]); err != nil {
			if step, err = r.survive(ctx, err, step, false); err != nil {
				return err
			}
			evalSteps = max(1, int(math.Round(c.EvalEvery*float64(r.steps))))
			continue
		}
		step++
		if r.job.Progress != nil {
			r.job.Progress(step, r.totalSteps)
		}
		if step%evalSteps == 0 || step == r.totalSteps {
			if err := r.evaluate(ctx, step); err != nil {
				// A rank lost during the evaluation: go on among the
				// survivors from the last step all of them completed.
				if step, err = r.survive(ctx, err, step, true); err != nil {
					return err
				}
				evalSteps = max(1, int(math.Round(c.EvalEvery*float64(r.steps))))
			}
		}
	}
	return nil
}

// shuffle sets order to this rank's sample order of an epoch: a
// permutation drawn from (seed, epoch, rank), or the file order.
func (r *run) shuffle(order []int, epoch int) {
	for i := range order {
		order[i] = i
	}
	if r.job.Cfg.NoShuffle {
		return
	}
	rng := rand.New(rand.NewPCG(r.job.Cfg.Seed, uint64(epoch)<<32|uint64(r.job.Comm.Rank())))
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
}

// step computes this rank's gradient of its batch, reduces it with the
// others' and applies the average.
func (r *run) step(ctx context.Context, step int, rows []int) error {
	b := data.Batch{Set: r.job.Train, Rows: rows}
	epoch := float64(step) / float64(r.steps)
	t0 := time.Now()
	var loss float64
	if r.red.SparseInput() {
		loss = r.m.(model.SparseModel).SparseGradient(b, &r.sg)
	} else {
		loss = r.m.Gradient(b, r.grad)
	}
	t1 := time.Now()
	before := r.job.Comm.Stats()
	if err := r.red.Reduce(ctx, Step{Step: step, Epoch: epoch}, r.grad, &r.sg, &r.avg); err != nil {
		return fmt.Errorf("step %d: %s reduction: %w", step, r.red.Name(), err)
	}
	r.bytes += r.job.Comm.Stats().BytesSent - before.BytesSent
	t2 := time.Now()
	r.opt.step(r.m.Params(), &r.avg, r.sched.at(epoch))
	t3 := time.Now()
	r.compute += t1.Sub(t0) + t3.Sub(t2)
	r.comm += t2.Sub(t1)
	r.lossSum += loss
	r.lossSteps++
	return nil
}

// evalRows is the number of test samples evaluated at once.
const evalRows = 256

// evaluate measures the test loss and accuracy over every rank's test
// shard and the train loss since the last evaluation, and reports them.
func (r *run) evaluate(ctx context.Context, step int) error {
	t0 := time.Now()
	test := r.job.Test
	var loss float64
	var right int
	rows := make([]int, 0, evalRows)
	for lo := 0; lo < test.Len(); lo += evalRows {
		rows = rows[:0]
		for i := lo; i < min(lo+evalRows, test.Len()); i++ {
			rows = append(rows, i)
		}
		l, c := r.m.Evaluate(data.Batch{Set: test, Rows: rows})
		loss += l
		right += c
	}
	wall := max(time.Since(r.start)-r.evalTime-time.Since(t0), 0)
	sums, err := allreduceSum(ctx, r.job.Comm, loss, float64(right), float64(test.Len()),
		r.lossSum, float64(r.lossSteps), float64(r.bytes), r.compute.Seconds(), r.comm.Seconds(), wall.Seconds())
	if err != nil {
		return fmt.Errorf("evaluation at step %d: %w", step, err)
	}
	r.evalTime += time.Since(t0)
	p := float64(r.job.Comm.Size())
	rec := Record{
		Variant: r.v.Name(), Step: step, Epoch: float64(step) / float64(max(r.steps, 1)),
		TestLoss: sums[0] / max(sums[2], 1), TestAccuracy: sums[1] / max(sums[2], 1),
		BytesSent: sums[5] / p, ComputeS: sums[6] / p, CommS: sums[7] / p,
		TimeS: sums[8] / p, EvalS: r.evalTime.Seconds(),
		Reduce: r.v.Reduce, Density: r.v.Density, Quant: r.v.Quant.String(), NP: r.job.Comm.Size(),
		LR: r.sched.at(float64(step) / float64(max(r.steps, 1))), Model: r.m.Describe(), Data: r.job.Cfg.Data,
		Seed: r.job.Cfg.Seed, Batch: r.job.Cfg.Batch, Momentum: r.job.Cfg.Momentum,
	}
	if rec.Reduce != "topk" {
		rec.Density = 1
	} else {
		rec.Select, rec.WarmupEpochs = r.job.Cfg.Select, r.job.Cfg.WarmupEpochs
		if r.v.Scope == compress.ScopeGlobal {
			rec.GlobalPeriod, rec.GlobalWarmupEpochs = r.job.Cfg.GlobalPeriod, r.job.Cfg.GlobalWarmupEpochs
		}
	}
	if sums[4] > 0 {
		tl := sums[3] / sums[4]
		rec.TrainLoss = &tl
	}
	if math.IsNaN(rec.TestLoss) || math.IsInf(rec.TestLoss, 0) {
		return fmt.Errorf("step %d: the test loss is %v: the training diverged (lower --lr)", step, rec.TestLoss)
	}
	r.lossSum, r.lossSteps = 0, 0
	r.res.Records = append(r.res.Records, rec)
	if r.report != nil {
		r.report(rec)
	}
	return nil
}
