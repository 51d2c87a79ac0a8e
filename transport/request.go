package transport

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Request is one pending send or receive. Transports create it with
// NewRequest and finish it with Complete; callers poll it with Test, wait
// on it with Wait or select on Done.
type Request struct {
	Peer int
	Tag  Tag
	Send bool

	completing atomic.Bool // set by the first Complete
	done       chan struct{}
	data       []byte
	err        error
	wait       func(ctx context.Context, r *Request) error
	watch      func(r *Request)
	notify     func(r *Request)
}

// NewRequest returns a pending request.
func NewRequest(peer int, tag Tag, send bool) *Request {
	return &Request{Peer: peer, Tag: tag, Send: send, done: make(chan struct{})}
}

// Failed returns a request that is already complete with err.
func Failed(peer int, tag Tag, send bool, err error) *Request {
	r := NewRequest(peer, tag, send)
	r.Complete(nil, err)
	return r
}

// Complete finishes the request. Only the first call has an effect, so a
// transport may race a completion against an abort safely.
func (r *Request) Complete(data []byte, err error) bool {
	// A flag rather than a sync.Once: this is on the path of every
	// message, and the Once's mutex costs more than the flag. Readers
	// look at data and err only after done is closed, which the winner
	// does after writing them.
	if !r.completing.CompareAndSwap(false, true) {
		return false
	}
	r.data, r.err = data, err
	close(r.done)
	if r.notify != nil {
		r.notify(r)
	}
	return true
}

// SetWaiter lets the transport make progress in the goroutine that waits:
// Wait calls wait(ctx, r) instead of blocking itself, and wait must
// return nil once r completes (its Completion channel is closed) or ctx's
// error once ctx ends, whichever comes first (AwaitRequest is the plain
// blocking part). The TCP transport reads the socket there, so that the
// data wakes the waiter directly instead of through a reader goroutine;
// the RDMA transport busy-polls its completion queue for a while before
// it blocks, so that a waiter sees its completion without another thread
// waking it (costly where wake-ups are slow). A transport calls it before
// handing the request out.
func (r *Request) SetWaiter(wait func(ctx context.Context, r *Request) error) {
	r.wait = wait
}

// SetWatcher registers watch, called by Done while the request is pending:
// someone will watch the channel instead of calling Wait, so a transport
// that progresses in waiters (see SetWaiter) must progress on its own. A
// transport calls it before handing the request out.
func (r *Request) SetWatcher(watch func(r *Request)) { r.watch = watch }

// SetNotify registers notify, called by the completing goroutine right
// after the request completes: a transport that schedules its ranks'
// goroutines itself (the simulator, transport/sim) learns so that the
// waiter may run, whoever completed the request. A transport calls it
// before handing the request out.
func (r *Request) SetNotify(notify func(r *Request)) { r.notify = notify }

// Done is closed when the request completes.
func (r *Request) Done() <-chan struct{} {
	if r.watch != nil && !r.Completed() {
		r.watch(r)
	}
	return r.done
}

// Completion is the channel Done returns, without calling the watcher: for
// a transport's waiter, which makes progress itself.
func (r *Request) Completion() <-chan struct{} { return r.done }

// Completed reports whether the request has completed. Unlike Done it
// never calls the watcher, so a transport can ask it under its own locks.
func (r *Request) Completed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Test reports whether the request has completed, and its error if so.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Wait blocks until the request completes or ctx ends. A context error is
// returned as is; the request stays pending.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	wait := r.wait
	if wait == nil {
		wait = AwaitRequest
	}
	if err := wait(ctx, r); err != nil && !r.Completed() {
		return err
	}
	return r.err
}

// Err returns the request's error once complete.
func (r *Request) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Data returns the received payload once a receive has completed.
func (r *Request) Data() []byte {
	select {
	case <-r.done:
		return r.data
	default:
		return nil
	}
}

func (r *Request) String() string {
	dir := "recv from"
	if r.Send {
		dir = "send to"
	}
	return fmt.Sprintf("%s rank %d (%v)", dir, r.Peer, r.Tag)
}

// AwaitRequest blocks until r completes (nil) or ctx ends (its error).
func AwaitRequest(ctx context.Context, r *Request) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
