package train

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/data"
)

// FashionMNISTDir is where Debian's dataset-fashion-mnist package puts
// the IDX files.
var FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// heldOut is the fraction of a LIBSVM file held out as the test set
// when no test file is given.
const heldOut = 0.1

// Load reads this rank's shards of the training and test sets of cfg
// and makes every rank agree on them: any rank's error (a missing file,
// a malformed line, a label out of range) becomes every rank's error,
// and the ranks agree on the number of features and on the labels'
// convention and number of classes.
func Load(ctx context.Context, comm *sparcml.Comm, cfg *Config) (train, test *data.Set, err error) {
	train, test, lerr := loadLocal(comm, cfg)
	if err := Agree(ctx, comm, lerr); err != nil {
		return nil, nil, err
	}
	if train.Sparse() || cfg.Data != "fashion-mnist" {
		if err := agreeShape(ctx, comm, cfg, train, test); err != nil {
			return nil, nil, err
		}
	}
	if err := checkShards(ctx, comm, cfg, train, test); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// loadLocal reads this rank's shards, without talking to the others.
func loadLocal(comm *sparcml.Comm, cfg *Config) (train, test *data.Set, err error) {
	o := data.Options{Rank: comm.Rank(), Size: comm.Size(), Dim: cfg.Dim, Limit: cfg.Samples, Seed: cfg.Seed}
	switch {
	case cfg.Data == "fashion-mnist":
		dir := FashionMNISTDir
		classes := 10
		if train, err = data.LoadIDX(filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte.gz"), classes, o); err != nil {
			return nil, nil, withHint(err)
		}
		o.Limit = 0
		if cfg.Samples > 0 {
			o.Limit = max(cfg.Samples/6, 1) // the test set's share at the published 60000/10000
		}
		if test, err = data.LoadIDX(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"), classes, o); err != nil {
			return nil, nil, withHint(err)
		}
		return train, test, nil
	case strings.HasPrefix(cfg.Data, "synthetic:"):
		var g data.Synth
		switch cfg.Data {
		case "synthetic:url":
			g = data.SynthURL()
		case "synthetic:webspam":
			g = data.SynthWebspam()
		default:
			return nil, nil, fmt.Errorf("unknown generator %q (want synthetic:url or synthetic:webspam)", cfg.Data)
		}
		g.Seed = cfg.Seed
		if cfg.Samples > 0 {
			g.Samples = cfg.Samples
		}
		if cfg.NNZ > 0 {
			g.NNZ = cfg.NNZ
		}
		if cfg.Dim > 0 {
			g.Dim = cfg.Dim
		}
		o.Limit = 0
		return g.Generate(o)
	}
	if cfg.Test == "" {
		o.TestFraction = heldOut
	}
	if train, test, err = data.LoadLIBSVM(cfg.Data, o); err != nil {
		return nil, nil, err
	}
	if cfg.Test != "" {
		o.TestFraction, o.Limit = 0, 0
		if cfg.Samples > 0 {
			o.Limit = max(cfg.Samples/9, 1)
		}
		if test, _, err = data.LoadLIBSVM(cfg.Test, o); err != nil {
			return nil, nil, err
		}
	}
	return train, test, nil
}

func withHint(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (install Debian's dataset-fashion-mnist package: make deps does)", err)
	}
	return err
}

// agreeShape makes the ranks agree on the number of features (the
// largest index of any rank's shards unless declared) and on the labels.
func agreeShape(ctx context.Context, comm *sparcml.Comm, cfg *Config, train, test *data.Set) error {
	dims, err := allreduceMax(ctx, comm, float64(train.Dim), float64(test.Dim))
	if err != nil {
		return err
	}
	dim := int(max(dims[0], dims[1]))
	if cfg.Dim > 0 {
		dim = cfg.Dim
	}
	train.Dim, test.Dim = dim, dim
	if train.Classes == 2 && test.Classes == 2 {
		return nil // the generator's 0/1 labels
	}
	s := data.Summarize(train, test)
	lo, hi := float64(s.Min), float64(s.Max)
	if s.N == 0 {
		lo, hi = math.Inf(1), math.Inf(-1)
	}
	zero := 0.0
	if s.Zero {
		zero = 1
	}
	all, err := allreduceMax(ctx, comm, -lo, hi, zero, float64(s.N))
	if err != nil {
		return err
	}
	g := data.LabelSummary{Min: int64(-all[0]), Max: int64(all[1]), Zero: all[2] > 0, N: int(all[3])}
	if g.N == 0 {
		return Agree(ctx, comm, fmt.Errorf("%s: no samples", cfg.Data))
	}
	lab := data.DecideLabels(g, cfg.Classes)
	err = lab.Apply(train)
	if err == nil {
		err = lab.Apply(test)
	}
	return Agree(ctx, comm, err)
}

// checkShards makes sure every rank can take the same number of steps:
// a shard smaller than one batch stops every rank with a message.
func checkShards(ctx context.Context, comm *sparcml.Comm, cfg *Config, train, test *data.Set) error {
	n, err := allreduceMin(ctx, comm, train.Len())
	if err != nil {
		return err
	}
	if n < cfg.Batch && cfg.Epochs > 0 {
		return fmt.Errorf("%s: the smallest rank's shard holds %d training samples, fewer than the per-rank batch of %d (use fewer ranks, a smaller --batch, or more --samples)", cfg.Data, n, cfg.Batch)
	}
	return nil
}
