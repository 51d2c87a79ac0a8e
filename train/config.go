// Package train is the data-parallel training job of `sparcml train`:
// every rank holds a shard of the data and a replica of the model,
// computes the gradient of its part of each mini-batch, and the ranks
// average their gradients with a dense allreduce, an exact sparse
// allreduce (for gradients sparse by nature) or top-k with error
// feedback before every rank takes the same SGD step. It reports train
// and test loss, test accuracy, the wall time split into compute and
// communication, and the bytes each rank sent, and saves the model as
// NumPy .npz.
package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/compress"
)

// Config is one training job. Zero fields take the model's defaults
// (Defaults).
type Config struct {
	Model  string // mlp or logreg
	Hidden []int  // the mlp's hidden layer sizes

	Data    string // fashion-mnist, synthetic:url, synthetic:webspam, or a LIBSVM file
	Test    string // a LIBSVM test file (default: a held-out 10% of Data)
	Dim     int    // declared number of features of LIBSVM data (0: the largest index)
	Classes int    // declared number of classes (0: from the labels)
	Samples int    // use about this many samples (synthetic: generate this many training samples)
	NNZ     int    // synthetic: nonzeros per sample

	Epochs      int
	Batch       int // per rank
	LR          float64
	Momentum    float64 // negative: the model's default
	WeightDecay float64
	Schedule    string // cosine, step, const

	EvalEvery float64 // epochs between evaluations
	Seed      uint64
	Threads   int    // goroutines of the matrix products per rank
	Load      string // start from this .npz instead of a fresh model
	NoShuffle bool   // visit each shard in order (for tests)
	OnFailure string // abort (default) or shrink: go on without a lost rank

	// Compression (--reduce topk).
	Select       string // exact, sampled, reuse, random
	WarmupEpochs float64
	// GlobalPeriod is, with the global scope, the steps an exact global
	// threshold serves (0: the library's default).
	GlobalPeriod int
	// GlobalWarmupEpochs is, with the global scope, the epochs over which
	// the count kept falls from P·k to k
	// (CompressorConfig.GlobalWarmupEpochs).
	GlobalWarmupEpochs float64
	ErrorFeedback      bool
}

// Defaults fills the zero fields of c with the defaults of its model:
// for the mlp on Fashion-MNIST, hidden layers 1024 and 256, a per-rank
// batch of 64, lr 0.05 with momentum 0.9 and cosine decay over 10 epochs;
// for logistic regression, a per-rank batch of 32, plain SGD (no
// momentum, so a sparse step costs its nonzeros, not its dimension) at
// lr 10 with cosine decay over 5 epochs: rare features get few updates,
// and small batches make each count (rows are scaled to unit norm, so
// the rate does not depend on the nonzeros per sample).
func (c *Config) Defaults() {
	if c.Model == "" {
		c.Model = "mlp"
	}
	if c.Data == "" {
		if c.Model == "mlp" {
			c.Data = "fashion-mnist"
		} else {
			c.Data = "synthetic:url"
		}
	}
	mlp := c.Model == "mlp"
	set := func(p *float64, mlpV, lrV float64) {
		if *p == 0 {
			if mlp {
				*p = mlpV
			} else {
				*p = lrV
			}
		}
	}
	if c.Hidden == nil && mlp {
		c.Hidden = []int{1024, 256}
	}
	if c.Epochs == 0 {
		c.Epochs = 5
		if mlp {
			c.Epochs = 10
		}
	}
	if c.Batch == 0 {
		c.Batch = 32
		if mlp {
			c.Batch = 64
		}
	}
	set(&c.LR, 0.05, 10)
	if c.Momentum < 0 {
		c.Momentum = 0
		if mlp {
			c.Momentum = 0.9
		}
	}
	if c.Schedule == "" {
		c.Schedule = "cosine"
	}
	set(&c.EvalEvery, 1, 1)
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Threads < 1 {
		c.Threads = 1
	}
	if c.Select == "" {
		c.Select = "exact"
	}
}

// Check reports the first setting out of range.
func (c *Config) Check() error {
	switch {
	case c.Model != "mlp" && c.Model != "logreg":
		return fmt.Errorf("unknown model %q (want mlp or logreg)", c.Model)
	case c.Epochs < 0:
		return fmt.Errorf("--epochs %d < 0", c.Epochs)
	case c.Batch < 1:
		return fmt.Errorf("--batch %d < 1", c.Batch)
	case c.LR <= 0:
		return fmt.Errorf("--lr %g must be positive", c.LR)
	case c.Momentum >= 1:
		return fmt.Errorf("--momentum %g must be below 1", c.Momentum)
	case c.WeightDecay < 0:
		return fmt.Errorf("--weight-decay %g < 0", c.WeightDecay)
	case c.Schedule != "cosine" && c.Schedule != "step" && c.Schedule != "const":
		return fmt.Errorf("unknown --schedule %q (want cosine, step or const)", c.Schedule)
	case c.EvalEvery <= 0:
		return fmt.Errorf("--eval-every %g must be positive", c.EvalEvery)
	case c.Dim < 0 || c.Classes < 0 || c.Classes == 1 || c.Samples < 0 || c.NNZ < 0:
		return fmt.Errorf("--dim, --classes (>= 2), --samples and --nnz must not be negative")
	case c.Select != "exact" && c.Select != "sampled" && c.Select != "reuse" && c.Select != "random":
		return fmt.Errorf("unknown --select %q (want exact, sampled, reuse or random)", c.Select)
	case c.WarmupEpochs < 0:
		return fmt.Errorf("--warmup-epochs %g < 0", c.WarmupEpochs)
	case c.GlobalPeriod < 0:
		return fmt.Errorf("--global-period %d < 0", c.GlobalPeriod)
	case !(c.GlobalWarmupEpochs >= 0):
		return fmt.Errorf("--global-warmup-epochs %g must not be negative", c.GlobalWarmupEpochs)
	case c.OnFailure != "" && c.OnFailure != "abort" && c.OnFailure != "shrink":
		return fmt.Errorf("unknown --on-failure %q (want abort or shrink)", c.OnFailure)
	}
	for _, h := range c.Hidden {
		if h < 1 {
			return fmt.Errorf("--hidden %v: sizes must be positive", c.Hidden)
		}
	}
	return nil
}

// Variant is one way of reducing the gradients: dense, sparse, or topk
// at a density, with the values optionally in low precision.
type Variant struct {
	Reduce  string
	Density float64 // topk: fraction of the entries sent
	Quant   sparcml.Quant
	NoEF    bool // topk without error feedback (the ablation)
	// NoMask keeps the velocity of the entries sent (topk with momentum
	// correction): without DGC's momentum-factor masking, every velocity
	// is sent in full, late, as dense momentum SGD would apply it.
	NoMask bool
	// PerLayer selects the top entries of every tensor (w0, b0, w1, ...)
	// separately, as Deep Gradient Compression does, instead of over the
	// whole parameter vector: every tensor sends ceil(Density*size).
	PerLayer bool
	// Scope is what the ranks' selections reduce to: their exact sum
	// (compress.ScopeUnion) or about Density·n of those sums, the
	// largest over every rank (compress.ScopeGlobal, Ok-Topk's global
	// top-k).
	Scope compress.Scope
}

// Name is the variant as ParseVariant reads it.
func (v Variant) Name() string {
	s := v.Reduce
	if v.Reduce == "topk" {
		s += ":" + strconv.FormatFloat(v.Density, 'g', -1, 64)
	}
	if v.Quant != sparcml.QuantNone {
		s += "+" + v.Quant.String()
	}
	if v.NoEF {
		s += "+noef"
	}
	if v.NoMask {
		s += "+nomask"
	}
	if v.PerLayer {
		s += "+layers"
	}
	if v.Scope == compress.ScopeGlobal {
		s += "+global"
	}
	return s
}

// ParseVariant reads "dense", "sparse", "topk:0.01", "topk:0.01+q4",
// "topk:1%+fp16+noef", "topk:0.01+nomask", "topk:0.01+layers",
// "topk:0.01+global": the reduction, its density and options.
func ParseVariant(s string) (Variant, error) {
	parts := strings.Split(strings.TrimSpace(s), "+")
	head, density, hasDensity := strings.Cut(parts[0], ":")
	v := Variant{Reduce: head}
	switch head {
	case "dense", "sparse":
		if hasDensity {
			return v, fmt.Errorf("variant %q: only topk takes a density", s)
		}
	case "topk":
		v.Density = 0.01
		if hasDensity {
			d, err := parseFraction(density)
			if err != nil {
				return v, fmt.Errorf("variant %q: %v", s, err)
			}
			v.Density = d
		}
	default:
		return v, fmt.Errorf("variant %q: unknown reduction %q (want dense, sparse or topk)", s, head)
	}
	for _, opt := range parts[1:] {
		if opt == "noef" {
			if head != "topk" {
				return v, fmt.Errorf("variant %q: noef is an option of topk", s)
			}
			v.NoEF = true
			continue
		}
		if opt == "nomask" {
			if head != "topk" {
				return v, fmt.Errorf("variant %q: nomask is an option of topk", s)
			}
			v.NoMask = true
			continue
		}
		if opt == "global" {
			if head != "topk" {
				return v, fmt.Errorf("variant %q: global is an option of topk", s)
			}
			v.Scope = compress.ScopeGlobal
			continue
		}
		if opt == "layers" {
			if head != "topk" {
				return v, fmt.Errorf("variant %q: layers is an option of topk", s)
			}
			v.PerLayer = true
			continue
		}
		q, err := sparcml.ParseQuant(opt)
		if err != nil {
			return v, fmt.Errorf("variant %q: %v", s, err)
		}
		v.Quant = q
	}
	return v, nil
}

// parseFraction reads 0.01 or 1%, in (0, 1].
func parseFraction(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if pct {
		v /= 100
	}
	if err != nil || !(v > 0 && v <= 1) {
		return 0, fmt.Errorf("density %q: want a fraction in (0, 1], e.g. 0.01 or 1%%", s)
	}
	return v, nil
}

// ParseFraction reads a density: 0.01 or 1%, in (0, 1].
func ParseFraction(s string) (float64, error) { return parseFraction(s) }
