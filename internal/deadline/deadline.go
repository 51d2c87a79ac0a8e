// Package deadline bounds a communicator's operations by its default
// timeout.
//
// Operations whose context has no deadline get the communicator's
// default timeout. A context.WithTimeout per operation would arm a runtime timer
// per operation, and arming a timer can wake an idle thread to re-plan
// the network poller's sleep: more context switches per small message
// when cores are few (perf stat of sparcml bench --op p2p with and
// without shared deadlines; docs/DEFAULTS.md, "What the transport
// adds"). So operations started close together
// whose contexts are cancelled together (the same Done channel: the same
// parent, or none) share one deadline context: a new one is made at most
// once per Slack(timeout), with its deadline that much later, so
// that every operation still gets at least the full timeout (and at most
// timeout + slack). A shared context is never cancelled early (an
// operation may still use it); it ends by its deadline, or at Close, so at
// most (timeout + slack) / slack of them, about 65, are alive at once. An
// operation whose parent differs from the current window's gets a context
// of its own, released when it ends. A shared context carries
// cancellation only, none of its parent's values: operations of different
// callers share it.
package deadline

import (
	"context"
	"sync"
	"time"
)

// Shared is a communicator's deadline contexts, shared by operations
// started close together.
type Shared struct {
	mu         sync.Mutex
	key        <-chan struct{} // the Done channel of the window's parent
	ctx        context.Context // nil: no window yet
	reuseUntil time.Time
	cancels    []timedCancel // of the shared contexts not yet expired
}

type timedCancel struct {
	cancel   context.CancelFunc
	deadline time.Time
}

// NoRelease is the release of an operation using a shared context.
var NoRelease context.CancelFunc = func() {}

// Slack is how much longer than the timeout an operation may get:
// 1/64 of it, at most a second.
func Slack(timeout time.Duration) time.Duration {
	return min(timeout/64, time.Second)
}

// Bound returns ctx bounded by timeout and what to call when the
// operation ends: a context shared with recent operations of the same
// parent when it can, one of its own otherwise.
func (s *Shared) Bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	key := ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx != nil && now.Before(s.reuseUntil) {
		if s.key == key {
			return s.ctx, NoRelease
		}
		return context.WithTimeout(ctx, timeout)
	}
	slack := Slack(timeout)
	deadline := now.Add(timeout + slack)
	shared, cancel := context.WithDeadline(cancelOnly{ctx}, deadline)
	// Drop (and release) the shared contexts that have expired.
	keep := s.cancels[:0]
	for _, tc := range s.cancels {
		if now.After(tc.deadline) {
			tc.cancel()
		} else {
			keep = append(keep, tc)
		}
	}
	s.cancels = append(keep, timedCancel{cancel, deadline})
	s.key, s.ctx, s.reuseUntil = key, shared, now.Add(slack)
	return shared, NoRelease
}

// CancelAll ends every shared context (Close).
func (s *Shared) CancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tc := range s.cancels {
		tc.cancel()
	}
	s.cancels, s.key, s.ctx = nil, nil, nil
}

// cancelOnly is a context's cancellation without its values.
type cancelOnly struct{ context.Context }

func (cancelOnly) Value(any) any { return nil }
