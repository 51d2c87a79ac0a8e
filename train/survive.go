package train

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sparcml/sparcml"
)

// Under Cfg.OnFailure "shrink" (sparcml train --on-failure shrink, with
// SPARCML_ON_PEER_LOSS=revoke), a rank lost during a step or an
// evaluation does not end the job: the survivors shrink the communicator
// (Comm.Shrink), agree on the last step every one of them completed,
// return to it (a rank that had completed the failed step on its own
// restores the parameters it kept before it), re-read their shards of
// the data for the new number of ranks, and go on from the same point of
// the epoch. Top-k's error feedback starts afresh: it held this rank's
// share of the old partition's residue.

// Shrunk, when set on a Job, is told of every shrink: the new
// communicator, the ranks lost (in the old numbering) and the step the
// training resumes at.
type Shrunk func(comm *sparcml.Comm, lost []int, step int)

// keep saves the parameters and the optimizer's velocity before a step,
// for a rank that completed a step the others did not, and keeps those
// from before the previous step: a rank that fails a step has completed
// one more step than a rank that failed the one before.
func (r *run) keep() {
	if r.job.Cfg.OnFailure != "shrink" {
		return
	}
	r.prev, r.kept = r.kept, r.prev
	r.kept.w = append(r.kept.w[:0], r.m.Params()...)
	r.kept.v = append(r.kept.v[:0], r.opt.v...)
}

// snapshot is the parameters and velocity before a step.
type snapshot struct{ w, v []float32 }

// survive handles err, the failure of a step or (inEval) of the
// evaluation after it, where step is the number of steps completed on
// this rank, and returns the step to go on from, or err when the job
// cannot go on.
func (r *run) survive(ctx context.Context, err error, step int, inEval bool) (int, error) {
	old := r.job.Comm
	lost := old.FailedRanks(err)
	if r.job.Cfg.OnFailure != "shrink" || len(lost) == 0 {
		return 0, err
	}
	comm, serr := old.Shrink(ctx, lost)
	if serr != nil {
		return 0, fmt.Errorf("%w; shrinking without ranks %v: %w", err, lost, serr)
	}
	fail := func(e error) (int, error) {
		return 0, fmt.Errorf("%w; going on without ranks %v: %w", err, lost, e)
	}
	done, aerr := allreduceMin(ctx, comm, step)
	if aerr != nil {
		return fail(aerr)
	}
	if done < step {
		// This rank completed a step another failed: undo it. It is the
		// step before the failed one, or the one just evaluated.
		undo := r.prev
		if inEval {
			undo = r.kept
		}
		copy(r.m.Params(), undo.w)
		r.opt.v = append(r.opt.v[:0], undo.v...)
	}
	train, test, lerr := Load(ctx, comm, r.job.Cfg)
	if lerr != nil {
		return fail(lerr)
	}
	red, rerr := newReducer(comm, r.v, r.m, r.job.Cfg)
	if rerr := Agree(ctx, comm, rerr); rerr != nil {
		return fail(rerr)
	}
	r.job.Comm, r.job.Train, r.job.Test, r.red = comm, train, test, red
	n, merr := allreduceMin(ctx, comm, train.Len())
	if merr != nil {
		return fail(merr)
	}
	// Keep the position in the epoch: the shards grew, and with them the
	// steps of an epoch.
	oldSteps := r.steps
	r.steps = max(n/r.job.Cfg.Batch, 1)
	r.totalSteps = r.steps * r.job.Cfg.Epochs
	resume := int(math.Round(float64(done) * float64(r.steps) / float64(oldSteps)))
	if r.job.Shrunk != nil {
		r.job.Shrunk(comm, slices.Clone(lost), resume)
	}
	return resume, nil
}
