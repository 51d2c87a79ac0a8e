package compress

// Selector chooses the entries of a gradient to send. It owns scratch
// buffers that grow on first use and are reused afterwards, so steady
// state allocates nothing; use one Selector per goroutine.
type Selector[T Float] struct {
	cfg Config
	sc  scratch
}

// NewSelector returns a Selector with cfg's selection settings (Method,
// SampleFraction, Tolerance, Adjustments, ReuseSteps; zero means the
// default); the other fields are ignored.
func NewSelector[T Float](cfg Config) (*Selector[T], error) {
	cfg = cfg.withDefaults()
	cfg.LayerSizes, cfg.Momentum, cfg.NoErrorFeedback = nil, 0, false
	if err := cfg.validate(0); err != nil {
		return nil, err
	}
	return &Selector[T]{cfg: cfg}, nil
}

// Result describes one selection.
type Result struct {
	// Count is the number of entries selected: k, or fewer when fewer
	// are nonzero; a threshold method's count within the tolerance.
	Count int
	// Threshold is the magnitude at the boundary: every selected entry
	// has at least this magnitude and every other entry at most this
	// (strictly less for a threshold method's selection). 0 means every
	// nonzero entry was selected, +Inf that none was asked for, NaN that
	// the boundary is a NaN entry. Random reports 0.
	Threshold float64
	// Exact says the selection is exactly the top k, ties to the lower
	// index (a threshold's count repaired among the gathered entries
	// is exact too).
	Exact bool
	// Fallback says a threshold method missed the tolerance and ran the
	// exact selection (a Reuse recomputation on schedule is not a
	// fallback).
	Fallback bool
}

// State is what a selection keeps from one step to the next for one
// buffer (one layer): the stream of random numbers and Reuse's threshold.
// Keep one per layer; the zero value is ready to use.
type State struct {
	// Seed, with Step, selects the random stream of Sampled and Random.
	Seed uint64
	// Step counts the selections made with this state.
	Step uint64

	threshold float64 // Reuse: the last exact threshold; Exact: the last
	age       int     // Reuse: steps since it was computed, 0 for none
}

// Select appends to dst, in increasing order, the indices of the entries
// of x to send at count k with the Selector's method, and advances st.
// Entries whose magnitude is zero are never selected; NaN counts as larger
// than +Inf (so a NaN is always sent); ties at the threshold go to the
// lower index. len(x) must not exceed MaxLen.
func (s *Selector[T]) Select(dst []uint32, x []T, k int, st *State) ([]uint32, Result) {
	seed := mix(st.Seed, st.Step)
	st.Step++
	switch s.cfg.Method {
	case Sampled:
		return s.Sampled(dst, x, k, seed)
	case Reuse:
		return s.reuse(dst, x, k, st)
	case Random:
		return s.RandomK(dst, x, k, seed)
	}
	return s.TopK(dst, x, k)
}

// TopK appends to dst, increasing, the indices of the k entries of x of
// largest magnitude (ties to the lower index; fewer when fewer than k are
// nonzero), in linear time: a radix selection on the magnitudes' bits.
func (s *Selector[T]) TopK(dst []uint32, x []T, k int) ([]uint32, Result) {
	var r Result
	k32, k64 := keysOf(x)
	if k32 != nil {
		return exact(&s.sc, dst, k32, k, &r), r
	}
	return exact(&s.sc, dst, k64, k, &r), r
}

// Sampled appends to dst, increasing, the indices of every entry of x at
// or above a threshold estimated from a random sample drawn from seed, so
// that about k are selected (within the Selector's tolerance; exact top-k
// after Adjustments misses).
func (s *Selector[T]) Sampled(dst []uint32, x []T, k int, seed uint64) ([]uint32, Result) {
	if k <= 0 {
		return dst, nothing
	}
	var r Result
	k32, k64 := keysOf(x)
	if k32 != nil {
		return sampled(&s.sc, dst, k32, k, &s.cfg, seed, &r), r
	}
	return sampled(&s.sc, dst, k64, k, &s.cfg, seed, &r), r
}

func (s *Selector[T]) reuse(dst []uint32, x []T, k int, st *State) ([]uint32, Result) {
	if k <= 0 {
		return dst, nothing
	}
	var r Result
	k32, k64 := keysOf(x)
	if k32 != nil {
		return reuse(&s.sc, dst, k32, k, &s.cfg, st, &r), r
	}
	return reuse(&s.sc, dst, k64, k, &s.cfg, st, &r), r
}

// RandomK appends to dst, increasing, k distinct indices of x drawn
// uniformly from seed (the same for the same seed, on every rank and in
// every run), leaving out those whose entry is zero.
func (s *Selector[T]) RandomK(dst []uint32, x []T, k int, seed uint64) ([]uint32, Result) {
	var r Result
	base := len(dst)
	k32, k64 := keysOf(x)
	if k32 != nil {
		dst = randomK(&s.sc, dst, k32, k, seed)
	} else {
		dst = randomK(&s.sc, dst, k64, k, seed)
	}
	r.Count = len(dst) - base
	return dst, r
}
