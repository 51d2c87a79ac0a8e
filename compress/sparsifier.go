package compress

import (
	"fmt"
	"math"

	"github.com/sparcml/sparcml/internal/vec"
	"github.com/sparcml/sparcml/sparse"
)

// Sparsifier turns each step's gradient of one buffer into the sparse
// update to send, keeping what it does not send. With error feedback (the
// default) every step
//
//	v += g                      (or, with Momentum m: u = m*u + g; v += u)
//	send the selected entries of v, and set them to zero in v
//	                            (with momentum masking: in u too)
//
// so that nothing is lost, only delayed: after every step, element by
// element, what was sent plus the residual v equals the residual before
// plus the gradient, exactly (the sent values are the residual's own
// floats, moved, not recomputed). Selection is per layer when the Config
// gives layer sizes, otherwise over the whole buffer.
//
// A Sparsifier is not safe for concurrent use; a training loop with one
// buffer per layer or bucket keeps one Sparsifier per buffer.
type Sparsifier[T Float] struct {
	cfg      Config
	n        int
	sel      *Selector[T]
	residual []T // v; nil without error feedback
	velocity []T // u; nil without momentum correction
	layers   []layer
	epoch    float64
	// deferRemoval leaves the selected entries in the state for Remove
	// (DeferRemoval).
	deferRemoval bool
}

type layer struct {
	off, n int
	st     State
}

// NewSparsifier returns a Sparsifier for a buffer of n entries. Zero
// fields of cfg take their defaults. Its state (the residual, and the
// velocity with momentum correction, n entries each) starts at zero.
func NewSparsifier[T Float](n int, cfg Config) (*Sparsifier[T], error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(n); err != nil {
		return nil, err
	}
	sel := &Selector[T]{cfg: cfg}
	s := &Sparsifier[T]{cfg: cfg, n: n, sel: sel}
	if !cfg.NoErrorFeedback {
		s.residual = make([]T, n)
	}
	if cfg.Momentum > 0 {
		s.velocity = make([]T, n)
	}
	sizes := cfg.LayerSizes
	if sizes == nil {
		sizes = []int{n}
	}
	off := 0
	for i, size := range sizes {
		s.layers = append(s.layers, layer{off: off, n: size, st: State{Seed: mix(cfg.Seed, uint64(i))}})
		off += size
	}
	return s, nil
}

// Len is the length of the buffer.
func (s *Sparsifier[T]) Len() int { return s.n }

// Config returns the configuration, defaults filled in.
func (s *Sparsifier[T]) Config() Config { return s.cfg }

// SetEpoch tells the density warm-up how far training has come (see
// WarmupDensity); without warm-up it changes nothing.
func (s *Sparsifier[T]) SetEpoch(epoch float64) { s.epoch = epoch }

// Epoch is the last SetEpoch's epoch (0 before any).
func (s *Sparsifier[T]) Epoch() float64 { return s.epoch }

// Density is the density of the next step: Config.Density once warm-up
// is over.
func (s *Sparsifier[T]) Density() float64 {
	return WarmupDensity(s.cfg.Density, s.epoch, s.cfg.WarmupEpochs)
}

// Residual is the error-feedback residual v (nil without error
// feedback): what was accumulated and not yet sent. It is the
// Sparsifier's own buffer, for inspection; changing it changes what will
// be sent.
func (s *Sparsifier[T]) Residual() []T { return s.residual }

// Velocity is the momentum-correction velocity u (nil without it).
func (s *Sparsifier[T]) Velocity() []T { return s.velocity }

// Reset zeroes the residual and the velocity and forgets reused
// thresholds, as at the start of training.
func (s *Sparsifier[T]) Reset() {
	clear(s.residual)
	clear(s.velocity)
	for i := range s.layers {
		s.layers[i].st = State{Seed: s.layers[i].st.Seed}
	}
}

// StepInfo describes one Step.
type StepInfo struct {
	// Density is the density of the step (after warm-up) and K the count
	// it asked for (the sum of every layer's ceil(Density*size)).
	Density float64
	K       int
	// Selected is the number of entries selected (the sparse vector's
	// length).
	Selected int
	// Threshold is the smallest boundary magnitude of the layers (see
	// Result.Threshold).
	Threshold float64
	// Exact says every layer's selection was exactly its top k.
	Exact bool
	// Fallbacks counts the layers whose threshold method fell back to
	// the exact selection.
	Fallbacks int
}

// Step folds grad into the state, selects, and writes the selected
// entries into out as a sparse vector of dimension Len() (its buffers are
// reused: keep out across steps and steady state allocates nothing).
// Without error feedback the selected values are grad's and nothing is
// kept; grad itself is never modified. The selected entries leave the
// residual (and, with masking, the velocity): if they cannot be delivered,
// Restore puts them back. With DeferRemoval they stay until Remove.
func (s *Sparsifier[T]) Step(grad []T, out *sparse.Vector[T]) (StepInfo, error) {
	return s.step(grad, out, false)
}

// StepTaking is Step for a caller that overwrites grad with the
// reduction's result next: with error feedback, which keeps grad in the
// residual, it also sets grad to zero, block by block in the pass that
// adds it into the residual, so that the caller writes the result's
// entries alone instead of clearing the whole buffer first
// (BenchmarkCompressorScopes, its local case). Without error feedback it is Step.
func (s *Sparsifier[T]) StepTaking(grad []T, out *sparse.Vector[T]) (StepInfo, error) {
	return s.step(grad, out, s.residual != nil)
}

// step is Step, also zeroing grad when takeGrad (error feedback only).
func (s *Sparsifier[T]) step(grad []T, out *sparse.Vector[T], takeGrad bool) (StepInfo, error) {
	if len(grad) != s.n {
		return StepInfo{}, fmt.Errorf("%w: gradient of %d entries for a sparsifier of %d", ErrInvalid, len(grad), s.n)
	}
	acc := grad
	if s.velocity != nil {
		accumulateMomentum(s.residual, s.velocity, grad, s.cfg.Momentum)
		if takeGrad {
			clear(grad)
		}
	}
	if s.residual != nil {
		acc = s.residual
	}
	// Plain error feedback adds grad in the selection's first pass
	// (accumulateSelect).
	fused := s.residual != nil && s.velocity == nil
	info := StepInfo{Density: s.Density(), Threshold: math.Inf(1), Exact: true}
	out.Reset(s.n)
	idx := reserve(out.Indices, s.most(info.Density))
	for i := range s.layers {
		l := &s.layers[i]
		k := SelectCount(l.n, info.Density)
		base := len(idx)
		var r Result
		if fused {
			idx, r = s.sel.accumulateSelect(idx, acc[l.off:l.off+l.n], grad[l.off:l.off+l.n], k, &l.st, takeGrad)
		} else {
			idx, r = s.sel.Select(idx, acc[l.off:l.off+l.n], k, &l.st)
		}
		if l.off != 0 {
			for j := base; j < len(idx); j++ {
				idx[j] += uint32(l.off)
			}
		}
		info.K += k
		if r.Count > 0 {
			info.Threshold = min(info.Threshold, r.Threshold)
		}
		info.Exact = info.Exact && r.Exact
		if r.Fallback {
			info.Fallbacks++
		}
	}
	if math.IsInf(info.Threshold, 1) {
		info.Threshold = 0
	}
	out.Indices = idx
	residual, masked := s.residual, s.maskedVelocity()
	if s.deferRemoval {
		residual, masked = nil, nil
	}
	out.Values = take(reserve(out.Values, len(idx)), acc, idx, residual, masked)
	info.Selected = len(idx)
	return info, nil
}

// most bounds the indices a step at density d may gather (a threshold
// pass stops once it has more than its limit, checking every
// gatherChunk entries), so one reservation serves the whole step.
func (s *Sparsifier[T]) most(d float64) int {
	total := 0
	for _, l := range s.layers {
		k := SelectCount(l.n, d)
		if s.cfg.Method == Sampled || s.cfg.Method == Reuse {
			_, hi := bounds(k, s.cfg.Tolerance)
			k = max(hi, candidateFactor*k) + gatherChunk
		}
		total += min(k, l.n)
	}
	return total
}

// reserve returns s emptied, with capacity for at least n elements.
func reserve[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, 0, n)
	}
	return s[:0]
}

// maskedVelocity is the velocity whose sent entries are cleared: with
// momentum-factor masking, the velocity; else nil.
func (s *Sparsifier[T]) maskedVelocity() []T {
	if s.cfg.NoMomentumMasking {
		return nil
	}
	return s.velocity
}

// DeferRemoval makes Step leave the selected entries in the residual
// (and their velocity, with momentum masking), for a reduction that
// applies only some of them (a global top-k): Remove then takes out those
// it applied, and an entry selected but not applied stays as if it had
// not been selected, momentum included. After a failed reduction nothing
// is to be done: the residual still holds every selected entry (Restore
// is for a Sparsifier without DeferRemoval). The residual ends
// bit-identical to clearing the selected entries and adding the
// unapplied ones back, and the step touches the residual only at the
// applied entries instead of at every selected one twice
// (BenchmarkCompressorScopes).
func (s *Sparsifier[T]) DeferRemoval() { s.deferRemoval = true }

// Remove completes a deferred step: it clears, in the residual and (with
// momentum masking) in the velocity, the entries of sent (what Step
// returned) that are not in dropped (what the reduction did not apply, a
// subset of sent), both with indices increasing. Without DeferRemoval it
// does nothing.
func (s *Sparsifier[T]) Remove(sent, dropped *sparse.Vector[T]) error {
	if !s.deferRemoval {
		return nil
	}
	if sent.Dim != s.n || dropped.Dim != s.n || sent.Dense || dropped.Dense {
		return fmt.Errorf("%w: removing vectors of dimension %d and %d from a sparsifier of %d", ErrInvalid, sent.Dim, dropped.Dim, s.n)
	}
	residual, masked := s.residual, s.maskedVelocity()
	j := 0
	for _, i := range sent.Indices {
		for j < len(dropped.Indices) && dropped.Indices[j] < i {
			j++
		}
		if j < len(dropped.Indices) && dropped.Indices[j] == i {
			continue
		}
		if residual != nil {
			residual[i] = 0
		}
		if masked != nil {
			masked[i] = 0
		}
	}
	return nil
}

// Restore adds the values of sent, a vector Step returned, back into the
// residual, after a failed reduction, so that the step's selected entries
// are sent later instead of lost. (The velocity that momentum masking
// cleared is not restored.) Without error feedback, or with
// DeferRemoval, it does nothing.
func (s *Sparsifier[T]) Restore(sent *sparse.Vector[T]) error {
	if s.residual == nil || s.deferRemoval {
		return nil
	}
	if sent.Dim != s.n {
		return fmt.Errorf("%w: restoring a vector of dimension %d into a sparsifier of %d", ErrInvalid, sent.Dim, s.n)
	}
	return sent.AddTo(s.residual)
}

// accumulate is the error-feedback update v += g, on vector kernels where
// the CPU has them (BenchmarkAccumulate).
func accumulate[T Float](v, g []T) { vec.Add(v, g) }

// accumulateMomentum is momentum correction's update: u = m*u + g, then
// v += u. The product is rounded to T before the addition (the explicit
// conversion forbids fusing it into a multiply-add), so every platform
// computes the same bits.
func accumulateMomentum[T Float](v, u, g []T, momentum float64) {
	m := T(momentum)
	u, g = u[:len(v)], g[:len(v)]
	for i := range v {
		ui := T(m*u[i]) + g[i]
		u[i] = ui
		v[i] += ui
	}
}

// take appends acc's values at idx to vals, and zeroes those entries of
// residual and of masked (each may be nil).
func take[T Float](vals, acc []T, idx []uint32, residual, masked []T) []T {
	for _, i := range idx {
		vals = append(vals, acc[i])
	}
	if residual != nil {
		for _, i := range idx {
			residual[i] = 0
		}
	}
	if masked != nil {
		for _, i := range idx {
			masked[i] = 0
		}
	}
	return vals
}
