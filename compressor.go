package sparcml

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/compress"
	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/sparse"
	"github.com/sparcml/sparcml/transport"
)

// CompressorConfig configures a Compressor. The zero value sends the
// exact top 1% of the whole buffer per step, with error feedback, values
// exact.
type CompressorConfig struct {
	// Sparsify is what each rank does locally: density and warm-up,
	// selection method, error feedback, momentum correction, layer sizes
	// (see package compress; zero fields take compress's defaults).
	Sparsify compress.Config
	// Quant sends the selected values in a low-precision encoding
	// (QuantFP16, QuantBF16, QuantQ8, QuantQ4, QuantQ2; the indices stay
	// exact), as WithQuant does for SparseAllreduce, whose error bounds
	// apply (docs/QUANTIZATION.md). The encoding's error is not fed back
	// into the residual: the stochastic encodings are unbiased, and
	// fp16/bf16 round to within 2^-11 and 2^-8 of the value.
	Quant Quant
	// ClipNorm, when positive, clips the gradient before it is
	// accumulated, by global norm as Deep Gradient Compression does:
	// the ranks average their squared norms (one allreduce of a single
	// number per call, before the selection) and every rank scales its
	// gradient, in place, by ClipNorm/norm when the norm is larger. The
	// norm is that of the buffer the Compressor reduces (a layer or a
	// bucket, when there is one Compressor per buffer).
	ClipNorm float64
	// Scope is what the reduction keeps of the ranks' selections:
	// compress.ScopeUnion (the zero value) averages all of them exactly,
	// a result of up to Size()·k entries; compress.ScopeGlobal keeps only
	// about k = the step's count of those sums, the largest in magnitude
	// over every rank (Ok-Topk's global top-k, collectives.GlobalTopk, on
	// about 2k entries per rank whatever Size()), and puts back into each
	// rank's residual what it selected and the global selection dropped
	// (with momentum masking, only the kept entries' velocity is cleared:
	// a dropped entry keeps its momentum, as if it had not been
	// selected). The global scope is lossy on top of the local selection: a choice
	// for the user, never made automatically (docs/COMPRESSION.md).
	Scope compress.Scope
	// GlobalPeriod is, with ScopeGlobal, the number of steps an exact
	// global threshold serves (itself included); the steps in between
	// estimate it from one allreduce of counts around the last threshold
	// (collectives.EstimateHistogram). Zero means
	// collectives.DefaultGlobalTopkPeriod.
	GlobalPeriod int
	// GlobalWarmupEpochs is, with ScopeGlobal, the epochs (as SetEpoch
	// counts them) over which the count the global selection keeps falls
	// from Size()·k, what the union of the ranks' selections holds at
	// most, to k: k·P^(1 - epoch/GlobalWarmupEpochs), exponentially, as
	// compress.WarmupDensity falls. Each rank still selects k, so the
	// warm-up sends at most the union's bytes, where the density warm-up
	// (compress.Config.WarmupEpochs) sends up to 25% of n a rank; it
	// applies more of the selections while the learning rate is high.
	// With the density warm-up as well, k is that warm-up's count at the
	// epoch, so the first steps keep all the ranks selected; the two
	// together are the global scope's recipe for accuracy
	// (docs/TRAINING.md, "Global top-k against the union at P = 8").
	// Zero: k from the first step.
	GlobalWarmupEpochs float64
}

// GlobalTopkStats describes a global top-k reduction (ScopeGlobal).
type GlobalTopkStats = collectives.GlobalTopkStats

// Compressor reduces gradients sparsely: each call adds the gradient
// into the error-feedback residual, selects the entries to send (top-k,
// sampled threshold, reused threshold or random-k, over the whole buffer
// or per layer), and averages every rank's selected entries with
// SparseAllreduce's Avg (whichever algorithm the cost model picks for the
// counts at hand): the sum of what the ranks sent divided by Size(); with
// CompressorConfig.Scope ScopeGlobal only the global top-k of those sums
// is kept, the rest returned to the residuals. It
// hands the average back dense, written into the gradient's own
// buffer (Reduce, Start), or sparse (ReduceSparse, StartSparse).
//
// # The optimizer's contract
//
// Without momentum correction the result is an averaged, sparsified
// gradient: apply it with any optimizer. With momentum correction
// (Sparsify.Momentum > 0) the Compressor applies the momentum itself,
// before selection, as Deep Gradient Compression requires: the result is
// already the momentum SGD update, and the optimizer must apply it with
// plain SGD (w -= lr * result), with no momentum of its own, or the
// momentum is applied twice. Add weight decay to the gradient before
// Reduce, as DGC does, so that it goes through the momentum too.
//
// # Buckets and overlap
//
// A Compressor owns the state of one buffer of fixed length. To overlap
// communication with the backward pass, as PyTorch DDP's buckets do, keep
// one Compressor per layer or bucket and Start each as soon as its
// gradient is ready: several Compressors' requests may be in flight on
// one Comm, but every rank must start them in the same order. One
// Compressor has one request in flight at a time (a Start waits for the
// previous one); its methods are not for concurrent use.
type Compressor[T Float] struct {
	c    *Comm
	cfg  CompressorConfig
	sp   *compress.Sparsifier[T]
	send SparseVector[T]
	// global is ScopeGlobal's threshold state; dropped the entries of
	// send the global selection did not keep.
	global  collectives.GlobalTopkState
	dropped SparseVector[T]
	recv    SparseVector[T]
	norm    [1]float64
	last    *CompressRequest
}

// NewCompressor returns a Compressor for gradients of n entries on c,
// with its residual (and velocity, with momentum correction) at zero.
// Every rank must pass the same n and configuration.
func NewCompressor[T Float](c *Comm, n int, cfg CompressorConfig) (*Compressor[T], error) {
	if c == nil {
		return nil, fmt.Errorf("sparcml: new compressor: %w: nil communicator", ErrInvalid)
	}
	if !(cfg.ClipNorm >= 0) {
		return nil, fmt.Errorf("sparcml: rank %d: new compressor: %w: clip norm %v", c.Rank(), ErrInvalid, cfg.ClipNorm)
	}
	if !cfg.Quant.Valid() {
		return nil, fmt.Errorf("sparcml: rank %d: new compressor: %w: value encoding %v", c.Rank(), ErrInvalid, cfg.Quant)
	}
	if !cfg.Scope.Valid() || cfg.GlobalPeriod < 0 || !(cfg.GlobalWarmupEpochs >= 0) {
		return nil, fmt.Errorf("sparcml: rank %d: new compressor: %w: scope %v, global period %d, global warm-up %v epochs",
			c.Rank(), ErrInvalid, cfg.Scope, cfg.GlobalPeriod, cfg.GlobalWarmupEpochs)
	}
	sp, err := compress.NewSparsifier[T](n, cfg.Sparsify)
	if err != nil {
		return nil, fmt.Errorf("sparcml: rank %d: new compressor: %w: %w", c.Rank(), ErrInvalid, err)
	}
	cfg.Sparsify = sp.Config()
	if cfg.Scope == compress.ScopeGlobal {
		sp.DeferRemoval() // finishGlobal removes only the entries kept
	}
	z := &Compressor[T]{c: c, cfg: cfg, sp: sp}
	z.global.Period = cfg.GlobalPeriod
	return z, nil
}

// Len is the length of the gradients the Compressor reduces.
func (z *Compressor[T]) Len() int { return z.sp.Len() }

// Config returns the configuration, defaults filled in.
func (z *Compressor[T]) Config() CompressorConfig { return z.cfg }

// SetEpoch tells the warm-ups (the density's, and with ScopeGlobal the
// count kept's) how far training has come (an epoch count; fractions
// allowed, see compress.WarmupDensity). Every rank must pass the same.
func (z *Compressor[T]) SetEpoch(epoch float64) { z.sp.SetEpoch(epoch) }

// globalKeep is the count the global selection keeps at this epoch when
// each rank selects k (CompressorConfig.GlobalWarmupEpochs).
func (z *Compressor[T]) globalKeep(k int) int {
	e, epoch := z.cfg.GlobalWarmupEpochs, z.sp.Epoch()
	if e == 0 || epoch >= e {
		return k
	}
	p := float64(z.c.Size())
	return int(math.Ceil(float64(k) * math.Pow(p, 1-max(epoch, 0)/e)))
}

// CompressStats describes one reduction on this rank.
type CompressStats struct {
	// StepInfo is the local selection: density (after warm-up), the
	// count asked for (K), the count selected (Selected), the threshold,
	// whether it was exact and how many layers fell back to the exact
	// selection.
	compress.StepInfo
	// ClipFactor is the factor the gradient was scaled by (1 without
	// clipping, or when its norm was within ClipNorm).
	ClipFactor float64
	// SelectedBytes is the size of this rank's selected entries on the
	// wire before index compression: 4 bytes per index plus the value
	// encoding's bytes (what a compression ratio is computed from). The
	// bytes the reduction sends depend on the algorithm;
	// Sparse.PredictedBytes is the cost model's estimate of them.
	SelectedBytes int64
	// Algo is the algorithm SparseAllreduce ran; with ScopeGlobal,
	// AlgoSSARSplitAllgather, whose schedule the global top-k follows.
	Algo Algo
	// NNZOut is the number of entries of the average (the union of what
	// every rank sent, the dimension when the sum came back dense; with
	// ScopeGlobal the entries kept).
	NNZOut int
	// Sparse is the SparseAllreduce's own statistics (ScopeUnion).
	Sparse SparseStats
	// Global is the global top-k's own statistics (ScopeGlobal).
	Global GlobalTopkStats
}

// Reduce replaces grad, this rank's gradient, by the average over every
// rank of their selected entries (zero where no rank sent anything). See
// Compressor for the contract with the optimizer. Every rank must call it
// with a gradient of Len() entries, in the same order as its other
// collectives. With error feedback, a reduction that fails after the
// selection leaves grad at zero and the whole gradient in the residual,
// to be sent later: nothing is lost.
func (z *Compressor[T]) Reduce(ctx context.Context, grad []T) (CompressStats, error) {
	return z.Start(ctx, grad).wait()
}

// ReduceSparse is Reduce with the average written into out, in sparse
// form when that is smaller (out's buffers are reused), for an optimizer
// that updates only the entries present. grad is read, not replaced
// (with ClipNorm it is scaled in place).
func (z *Compressor[T]) ReduceSparse(ctx context.Context, grad []T, out *SparseVector[T]) (CompressStats, error) {
	return z.StartSparse(ctx, grad, out).wait()
}

// Start is Reduce's start form: it clips and selects at once (in the
// caller's goroutine: the collectives it starts take their sequence
// numbers in call order), starts the reduction and returns. grad must not
// be touched until the request completes, when it holds the average.
func (z *Compressor[T]) Start(ctx context.Context, grad []T) *CompressRequest {
	return z.start(ctx, grad, nil, false)
}

// StartSparse is ReduceSparse's start form; out holds the average once
// the request completes.
func (z *Compressor[T]) StartSparse(ctx context.Context, grad []T, out *SparseVector[T]) *CompressRequest {
	return z.start(ctx, grad, out, true)
}

// CompressRequest is a reduction started by Compressor.Start or
// StartSparse. It completes on its own; Wait observes it.
type CompressRequest struct {
	done  chan struct{}
	stats CompressStats
	err   error
}

// Wait blocks until the reduction completes or ctx ends, and returns its
// statistics and error. A ctx ending here stops the waiting, not the
// reduction: the gradient must not be touched until Done is closed (to
// cancel the reduction on every rank, cancel the context it was started
// with).
func (r *CompressRequest) Wait(ctx context.Context) (CompressStats, error) {
	select {
	case <-r.done:
		return r.stats, r.err
	default:
	}
	select {
	case <-r.done:
		return r.stats, r.err
	case <-ctx.Done():
		return CompressStats{}, fmt.Errorf("sparcml: waiting for a compressed reduction: %w", ctx.Err())
	}
}

// wait waits for completion whatever happens: the blocking forms return
// only once the result (or the restored residual) is in place. The
// reduction is bounded by its own context, so this cannot outlast it.
func (r *CompressRequest) wait() (CompressStats, error) {
	<-r.done
	return r.stats, r.err
}

// Done is closed when the reduction has completed and its result is in
// place.
func (r *CompressRequest) Done() <-chan struct{} { return r.done }

// start runs a reduction into grad (the dense forms) or out (the sparse
// forms).
func (z *Compressor[T]) start(ctx context.Context, grad []T, out *SparseVector[T], sparseForm bool) *CompressRequest {
	if z.last != nil {
		<-z.last.done // one request in flight per Compressor
	}
	r := &CompressRequest{done: make(chan struct{}), stats: CompressStats{ClipFactor: 1}}
	z.last = r
	switch {
	case len(grad) != z.Len():
		return z.invalid(ctx, r, fmt.Errorf("gradient of %d entries for a compressor of %d", len(grad), z.Len()))
	case sparseForm && out == nil:
		return z.invalid(ctx, r, errors.New("nil output vector"))
	}
	if z.cfg.ClipNorm > 0 {
		f, err := z.clip(ctx, grad)
		if err != nil {
			return z.fail(r, err)
		}
		r.stats.ClipFactor = f
	}
	step := z.sp.Step
	if out == nil {
		step = z.sp.StepTaking // grad is overwritten with the result
	}
	info, err := step(grad, &z.send)
	if err != nil {
		return z.fail(r, err)
	}
	r.stats.StepInfo = info
	r.stats.SelectedBytes = selectedBytes(z.cfg.Quant, info.Selected, sparse.ValueSize[T]())
	dst := out
	if dst == nil {
		dst = &z.recv
	}
	if z.cfg.Scope == compress.ScopeGlobal {
		return z.startGlobal(ctx, r, grad, dst, out == nil)
	}
	// The tensor is this step's density: a Compressor's steps send about
	// density*n entries each, so they reuse the counts exchange's decision
	// (WithTensor) until the warm-up moves the density. Compressors of
	// one length and density share it; their counts are alike too.
	tensor := WithTensor(math.Float64bits(z.sp.Density()))
	sr := StartSparseAllreduce(ctx, z.c, &z.send, dst, Avg, WithQuant(z.cfg.Quant), tensor)
	go z.finish(r, sr, grad, dst, out == nil)
	return r
}

// finish waits for the sparse allreduce and puts the average in place.
func (z *Compressor[T]) finish(r *CompressRequest, sr *Request, grad []T, avg *SparseVector[T], intoGrad bool) {
	defer close(r.done)
	// The operation is bounded by its own context and the communicator's
	// timeout; waiting here without a deadline cannot outlive it.
	if err := sr.Wait(context.Background()); err != nil {
		_ = z.sp.Restore(&z.send) // keep the selected entries for a later step
		r.err = err
		return
	}
	st := sr.SparseStats()
	r.stats.Sparse, r.stats.Algo, r.stats.NNZOut = *st, st.Algo, st.NNZOut
	if intoGrad {
		z.writeResult(grad, avg)
	}
}

// startGlobal starts the global top-k reduction of the selected entries
// (ScopeGlobal): the average of the kept sums, every rank's sum divided by
// Size(), the ranks that did not select an index counting as zeros.
func (z *Compressor[T]) startGlobal(ctx context.Context, r *CompressRequest, grad []T, dst *SparseVector[T], intoGrad bool) *CompressRequest {
	k := z.globalKeep(r.stats.K)
	gs := new(GlobalTopkStats)
	fn := func(op *collectives.Op, _ callConfig) (Algo, error) {
		var err error
		*gs, err = collectives.GlobalTopk(op, &z.send, dst, &z.dropped, &z.global, collectives.GlobalTopkOptions{
			K: k, Reduce: Avg, Quant: z.cfg.Quant, QuantSeed: quantSeed(op.Rank(), op.Seq), Model: z.c.model,
		})
		return AlgoSSARSplitAllgather, err
	}
	sr := z.c.start(ctx, "global-topk", fn, nil)
	go z.finishGlobal(r, sr, grad, dst, intoGrad, gs)
	return r
}

// finishGlobal waits for the global top-k, takes what it kept out of the
// residual (what it dropped stays there) and puts the average in place.
func (z *Compressor[T]) finishGlobal(r *CompressRequest, sr *Request, grad []T, avg *SparseVector[T], intoGrad bool, gs *GlobalTopkStats) {
	defer close(r.done)
	// Bounded by its own context, as in finish.
	if err := sr.Wait(context.Background()); err != nil {
		r.err = err // the residual still holds the selected entries
		return
	}
	if err := z.sp.Remove(&z.send, &z.dropped); err != nil {
		r.err = fmt.Errorf("sparcml: rank %d: compressed reduction: %w", z.c.Rank(), err)
		return
	}
	r.stats.Global, r.stats.Algo, r.stats.NNZOut = *gs, AlgoSSARSplitAllgather, gs.Kept
	if intoGrad {
		z.writeResult(grad, avg)
	}
}

// writeResult writes the average into grad, which StepTaking left at
// zero with error feedback: only the average's entries are written.
func (z *Compressor[T]) writeResult(grad []T, avg *SparseVector[T]) {
	if avg.Dense || z.sp.Residual() == nil {
		avg.ToDense(grad)
		return
	}
	for j, i := range avg.Indices {
		grad[i] = avg.Values[j]
	}
}

// clip scales grad by the clipping factor of the ranks' mean squared
// norm.
func (z *Compressor[T]) clip(ctx context.Context, grad []T) (float64, error) {
	z.norm[0] = compress.SquaredNorm(grad)
	if err := Allreduce(ctx, z.c, z.norm[:], Sum); err != nil {
		return 1, err
	}
	f := compress.ClipFactor(z.norm[0]/float64(z.c.Size()), z.cfg.ClipNorm)
	compress.Scale(grad, f)
	return f, nil
}

// fail completes r with err, an error of one of the call's collectives
// (which names rank and operation already) or of the selection.
func (z *Compressor[T]) fail(r *CompressRequest, err error) *CompressRequest {
	r.err = err
	var ce *Error
	if !errors.As(err, &ce) {
		r.err = fmt.Errorf("sparcml: rank %d: compressed reduction: %w", z.c.Rank(), err)
	}
	close(r.done)
	return r
}

// invalid completes r with an invalid-argument error found before any of
// the call's collectives started. The other ranks are about to wait in
// them, so the collective this call would have started is failed on every
// rank with this rank's reason, instead of leaving them waiting or
// completing without this rank's contribution.
func (z *Compressor[T]) invalid(ctx context.Context, r *CompressRequest, err error) *CompressRequest {
	r.err = fmt.Errorf("sparcml: rank %d: compressed reduction: %w: %w", z.c.Rank(), ErrInvalid, err)
	name, kind := "sparse-allreduce", transport.OpSparseAllreduce
	if z.cfg.Scope == compress.ScopeGlobal {
		name, kind = "global-topk", transport.OpGlobalTopk
	}
	_ = z.c.run(ctx, name, func(op *collectives.Op, _ callConfig) (Algo, error) {
		op.Desc.Kind = kind
		return AlgoAuto, op.Fail(r.err)
	}, nil)
	close(r.done)
	return r
}

// selectedBytes is CompressStats.SelectedBytes.
func selectedBytes(q Quant, n, valueSize int) int64 {
	if q == QuantNone {
		return int64(n) * int64(sparse.IndexSize+valueSize)
	}
	return int64(n)*sparse.IndexSize + int64(sparse.QuantValueBytes(q, quant.DefaultBucketSize, uint64(n)))
}
