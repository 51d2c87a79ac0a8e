package transport

// Goroutines is implemented by a transport that runs a rank's goroutines
// itself: the simulator (transport/sim) runs one goroutine of the whole job
// at a time, in virtual time, and must know every goroutine of a rank and
// every wait between them, or a goroutine blocked on a Go channel would
// hold up the job. Code that starts goroutines of its own inside a
// collective, or hands work between them, does it through Go and
// NewSignal, which are plain goroutines and requests on every other
// transport: the same code runs on TCP and in the simulator.
type Goroutines interface {
	// Go starts fn as a goroutine of this rank; the request completes
	// when fn returns.
	Go(fn func()) *Request
	// NewSignal returns a pending request that a goroutine of this rank
	// completes (Request.Complete) for another to wait on.
	NewSignal() *Request
}

// Unwrapper is implemented by a view of a transport (a communicator's
// group of ranks) to give the transport under it, where Go and NewSignal
// look for Goroutines and Worker.
type Unwrapper interface {
	Unwrap() Transport
}

func goroutinesOf(t Transport) Goroutines {
	g, _ := find[Goroutines](t)
	return g
}

// Go starts fn in a new goroutine of t's rank (t's Goroutines when it has
// them, a plain goroutine otherwise) and returns a request that completes
// when fn returns.
func Go(t Transport, fn func()) *Request {
	if g := goroutinesOf(t); g != nil {
		return g.Go(fn)
	}
	r := NewRequest(-1, Tag{}, false)
	go func() {
		defer r.Complete(nil, nil)
		fn()
	}()
	return r
}

// NewSignal returns a pending request for one goroutine of t's rank to
// complete and another to wait on (t's Goroutines when it has them, a
// plain request otherwise).
func NewSignal(t Transport) *Request {
	if g := goroutinesOf(t); g != nil {
		return g.NewSignal()
	}
	return NewRequest(-1, Tag{}, false)
}

// Kernel is a kind of computation a collective reports to Work.
type Kernel uint8

const (
	// KernelReduce is a dense element-wise reduction (or a scatter-add of
	// sparse entries into a dense range), priced like CostModel.Gamma.
	KernelReduce Kernel = iota
	// KernelMerge is a merge of sorted sparse streams, priced like
	// CostModel.SparseGamma.
	KernelMerge
)

// Worker is implemented by a transport that prices computation in its
// own time: the simulator charges the calling goroutine for it in virtual
// time.
type Worker interface {
	Work(k Kernel, bytes int)
}

// Work reports that the calling goroutine of t's rank just ran kernel k
// over bytes bytes; a no-op unless t (or the transport under a view of
// it) is a Worker.
func Work(t Transport, k Kernel, bytes int) {
	if w, ok := find[Worker](t); ok {
		w.Work(k, bytes)
	}
}

// find returns t, or the first transport under its views, that
// implements I.
func find[I any](t Transport) (I, bool) {
	for t != nil {
		if i, ok := t.(I); ok {
			return i, true
		}
		u, ok := t.(Unwrapper)
		if !ok {
			break
		}
		t = u.Unwrap()
	}
	var zero I
	return zero, false
}
