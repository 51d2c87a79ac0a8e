package transport

// Go starts fn in a new goroutine of t's rank (Capabilities.Go when t has
// it, a plain goroutine otherwise) and returns a request that completes
// when fn returns.
func Go(t Transport, fn func()) *Request {
	if g := t.Caps().Go; g != nil {
		return g(fn)
	}
	r := NewRequest(-1, Tag{}, false)
	go func() {
		defer r.Complete(nil, nil)
		fn()
	}()
	return r
}

// NewSignal returns a pending request for one goroutine of t's rank to
// complete and another to wait on (Capabilities.NewSignal when t has it,
// a plain request otherwise).
func NewSignal(t Transport) *Request {
	if s := t.Caps().NewSignal; s != nil {
		return s()
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

// Work reports that the calling goroutine of t's rank just ran kernel k
// over bytes bytes; a no-op unless t has Capabilities.Work.
func Work(t Transport, k Kernel, bytes int) {
	if w := t.Caps().Work; w != nil {
		w(k, bytes)
	}
}
