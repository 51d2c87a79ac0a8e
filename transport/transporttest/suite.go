// Package transporttest is the conformance suite of the transport
// contract: the behaviour every transport.Transport must show, whatever
// it runs over. A transport is done when it passes it:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
//			return connect(t, cfg.Size, cfg.UnexpectedLimit) // cfg.Size ranks, connected, closed at t's end
//		})
//	}
//
// The cases: receives posted before and after their message arrives, into
// missing, exact, larger and smaller buffers; zero-length and multi-MiB
// messages; many operations in flight, completing out of order; the
// unexpected-message budget and back-pressure (a flooding sender is held
// back, memory stays bounded, other peers and directions go on, and
// everything completes once the receives are posted); deadlines (a Wait
// whose context ends leaves its request pending, to complete later);
// progress for callers who select on Done or poll Test instead of Wait;
// FailOp, locally and as seen by the peers, each failure classified by
// its code on every rank; a peer's graceful Close
// (operations not involving it go on, those involving it fail naming it,
// what it sent before closing is delivered); Abort (everything pending
// and later fails, the peers see this rank lost, named); Close of this
// rank; descriptor mismatches (the receiver names both sides, and with
// FailOp so does the sender), the per-operation kind check among them;
// and the capabilities the transport reports (transport.Capabilities):
// alike on every rank, and each one doing what it says (a Failed channel
// that closes on failure, FailLocal and FailOpLocal that tell no peer,
// Survive that keeps the survivors going).
//
// Every case runs under a deadline: a hang fails the case with every
// goroutine's stack instead of blocking the test binary.
package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// Config is what a Factory must give the transports it makes.
type Config struct {
	// Size is the number of ranks: the factory returns one transport
	// per rank, index = rank, all connected to each other.
	Size int
	// UnexpectedLimit is the per-peer budget, in bytes, of messages that
	// arrived before their receive was posted, as each transport's own
	// configuration calls it. The budget case depends on it.
	UnexpectedLimit int64
}

// Factory makes the connected transports of one case. It registers their
// Close with t.Cleanup (the suite closes some itself: Close must be
// idempotent) and fails t if they cannot be made.
type Factory func(t *testing.T, cfg Config) []transport.Transport

// Budget is the UnexpectedLimit the suite asks for.
const Budget = 1 << 20

// Suite is the conformance suite for one transport.
type Suite struct {
	// New makes the transports of each case.
	New Factory
	// Timeout bounds each case (default 60 s). Slow environments (the
	// race detector in an emulated guest) may need more.
	Timeout time.Duration
	// Large is the size of the multi-MiB messages (default 16 MiB + 3).
	Large int
}

// Run runs every case of the suite against the transports f makes, with
// the default settings.
func Run(t *testing.T, f Factory) { Suite{New: f}.Run(t) }

// Run runs every case of the suite.
func (s Suite) Run(t *testing.T) {
	if s.Timeout <= 0 {
		s.Timeout = 60 * time.Second
	}
	if s.Large <= 0 {
		s.Large = 16<<20 + 3
	}
	s.run(t, "PostBeforeAndAfter", 2, casePostBeforeAndAfter)
	s.run(t, "LargeMessages", 2, func(c *Case) { caseLargeMessages(c, s.Large) })
	s.run(t, "ManyInFlight", 3, caseManyInFlight)
	s.run(t, "BudgetSmall", 3, func(c *Case) { caseBudget(c, 4<<10, 8192) })
	s.run(t, "BudgetLarge", 3, func(c *Case) { caseBudget(c, 1<<20, 32) })
	s.run(t, "Deadline", 2, caseDeadline)
	s.run(t, "Progress", 2, caseProgress)
	s.run(t, "FailOp", 3, caseFailOp)
	s.run(t, "FailOpCodes", 3, caseFailOpCodes)
	s.run(t, "PeerClose", 3, casePeerClose)
	s.run(t, "Abort", 3, caseAbort)
	s.run(t, "Close", 2, caseClose)
	s.run(t, "Mismatch", 2, caseMismatch)
	s.run(t, "Caps", 2, caseCaps)
	s.run(t, "CapsFailed", 3, caseFailed)
	s.run(t, "CapsFailLocal", 3, caseFailLocal)
	s.run(t, "CapsFailOpLocal", 2, caseFailOpLocal)
	s.run(t, "CapsSurvive", 4, caseSurvive)
}

// Case is one case in progress: its transports, its context (ended by
// the case's deadline) and its test.
type Case struct {
	*testing.T
	Ts  []transport.Transport
	Ctx context.Context
}

func (s Suite) run(t *testing.T, name string, size int, body func(c *Case)) {
	t.Run(name, func(t *testing.T) {
		ts := s.New(t, Config{Size: size, UnexpectedLimit: Budget})
		if len(ts) != size {
			t.Fatalf("the factory made %d transports, want %d", len(ts), size)
		}
		for r, tr := range ts {
			if tr.Rank() != r || tr.Size() != size {
				t.Fatalf("transport %d says rank %d of %d, want %d of %d", r, tr.Rank(), tr.Size(), r, size)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		// The backstop: a case blocked somewhere no context reaches
		// (a Close that hangs) fails with every stack, and its
		// transports are closed so that it returns.
		watchdog := time.AfterFunc(s.Timeout+5*time.Second, func() {
			buf := make([]byte, 4<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%s did not finish within its deadline of %v; goroutines:\n%s", name, s.Timeout, buf)
			for _, tr := range ts {
				go tr.Close()
			}
		})
		defer watchdog.Stop()
		body(&Case{T: t, Ts: ts, Ctx: ctx})
	})
}

// parallel runs fn for every rank at once and waits for all of them. fn
// reports failures with Errorf (never Fatal: it is not the test's
// goroutine).
func (c *Case) parallel(fn func(rank int)) {
	var wg sync.WaitGroup
	for r := range c.Ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(r)
		}()
	}
	wg.Wait()
}

// wait waits for r under the case's deadline.
func (c *Case) wait(r *transport.Request) error { return r.Wait(c.Ctx) }

// waitShort waits for r for at most d: for requests that must fail or
// complete soon, or stay pending.
func (c *Case) waitShort(r *transport.Request, d time.Duration) error {
	ctx, cancel := context.WithTimeout(c.Ctx, d)
	defer cancel()
	return r.Wait(ctx)
}

// eventually polls cond every few milliseconds until it holds or the
// case's deadline passes, and reports whether it held.
func (c *Case) eventually(cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-c.Ctx.Done():
			return cond()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// desc is the descriptor of the suite's messages: a collective's, so that
// the matcher's per-operation kind check applies.
var desc = transport.Desc{Kind: transport.OpAllreduce, DType: 1, Reduce: 0, Algo: 1, Count: 7}

func tag(comm uint32, seq uint64, step uint32) transport.Tag {
	return transport.Tag{Comm: comm, Seq: seq, Step: step}
}

// pattern is the payload of message (src, dst, t) of n bytes: a slice of
// a random reference at an offset of its own, so that a payload that
// reaches the wrong receive shows. Slices are read-only (they are shared);
// making them costs nothing, which keeps slow environments (the race
// detector in an emulated guest) within the cases' deadlines.
func pattern(src, dst int, t transport.Tag, n int) []byte {
	ref := reference(n + 1)
	h := uint64(src+1)*0x9E3779B97F4A7C15 ^ uint64(dst+1)*0xC2B2AE3D27D4EB4F ^
		t.Seq*0x165667B19E3779F9 ^ uint64(t.Step)*0x27D4EB2F165667C5 ^ uint64(t.Comm)*0x94D049BB133111EB ^ uint64(n)
	h ^= h >> 31
	off := int(h % uint64(len(ref)-n+1))
	return ref[off : off+n : off+n]
}

var (
	refMu sync.Mutex
	ref   []byte
)

// reference returns the random bytes patterns are cut from, at least n.
func reference(n int) []byte {
	refMu.Lock()
	defer refMu.Unlock()
	if len(ref) < n {
		b := make([]byte, max(32<<20, n+n/2))
		x := uint64(0x9E3779B97F4A7C15)
		for i := 0; i+8 <= len(b); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(b[i:], x)
		}
		ref = b
	}
	return ref
}

// firstDiff is the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
