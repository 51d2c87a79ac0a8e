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
// look for Goroutines.
type Unwrapper interface {
	Unwrap() Transport
}

func goroutinesOf(t Transport) Goroutines {
	for t != nil {
		if g, ok := t.(Goroutines); ok {
			return g
		}
		u, ok := t.(Unwrapper)
		if !ok {
			return nil
		}
		t = u.Unwrap()
	}
	return nil
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
