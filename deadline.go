package sparcml

import (
	"context"
	"sync"
	"time"
)

// Operations whose context has no deadline get the communicator's default
// timeout. A context.WithTimeout per operation would arm a runtime timer
// per operation, and arming a timer can wake an idle thread to re-plan
// the network poller's sleep: on a 2-core machine that costs about as
// much as a small message (measured with perf stat on `sparcml bench --op
// p2p`: 1.5-2.5 context switches and 2-3 system calls per round trip).
// So operations started close together with the same parent context
// share one deadline context: a new one is made at most once per
// deadlineSlack(timeout), with its deadline that much later, so that
// every operation still gets at least the full timeout (and at most
// timeout + slack). Shared contexts are never cancelled early (an
// operation still uses it); they end by their deadline, or at Close.
type sharedDeadlines struct {
	mu         sync.Mutex
	parent     context.Context
	ctx        context.Context
	reuseUntil time.Time
	cancels    []timedCancel // of the shared contexts not yet expired
}

type timedCancel struct {
	cancel   context.CancelFunc
	deadline time.Time
}

// deadlineSlack is how much longer than the timeout an operation may get:
// 1/64 of it, at most a second.
func deadlineSlack(timeout time.Duration) time.Duration {
	return min(timeout/64, time.Second)
}

// bound returns ctx bounded by timeout, sharing a context with recent
// operations of the same parent when it can.
func (s *sharedDeadlines) bound(ctx context.Context, timeout time.Duration) context.Context {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx != nil && s.parent == ctx && now.Before(s.reuseUntil) {
		return s.ctx
	}
	slack := deadlineSlack(timeout)
	deadline := now.Add(timeout + slack)
	shared, cancel := context.WithDeadline(ctx, deadline)
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
	s.parent, s.ctx, s.reuseUntil = ctx, shared, now.Add(slack)
	return shared
}

// cancelAll ends every shared context (Close).
func (s *sharedDeadlines) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tc := range s.cancels {
		tc.cancel()
	}
	s.cancels, s.parent, s.ctx = nil, nil, nil
}
