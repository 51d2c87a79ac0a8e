package transporttest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// The capability cases hold a transport to what its Caps reports; a case
// whose capability the transport does not report checks only that it
// says so alike on every rank.

// pendingFor is how long a request that must stay pending is watched.
const pendingFor = 200 * time.Millisecond

// caseCaps: every rank reports the same capabilities, the same Failed
// channel at every call (a watcher may take it once), open while the
// transport works; a segment size is not negative, and messages of one
// segment and of a few and a bit travel intact.
func caseCaps(c *Case) {
	first := c.Ts[0].Caps()
	for r, tr := range c.Ts {
		caps := tr.Caps()
		if caps.SegmentBytes != first.SegmentBytes || announced(caps) != announced(first) {
			c.Errorf("rank %d reports %s, rank 0 %s: the ranks of one job must agree", r, describe(caps), describe(first))
		}
		if caps.Failed != nil && tr.Caps().Failed != caps.Failed {
			c.Errorf("rank %d: Caps returns a new Failed channel at every call", r)
		}
	}
	if first.SegmentBytes < 0 {
		c.Fatalf("SegmentBytes = %d, want 0 (no preference) or a size", first.SegmentBytes)
	}
	if seg := first.SegmentBytes; seg > 0 {
		for i, n := range []int{seg, 3*seg + 1} {
			if err := c.roundTrip(0, 1, tag(11, 1, uint32(10*i)), n); err != nil {
				c.Errorf("a message of %d bytes with segments of %d: %v", n, seg, err)
			}
		}
	} else if err := c.roundTrip(0, 1, tag(11, 1, 0), 1000); err != nil {
		c.Error(err)
	}
	for r, tr := range c.Ts {
		if failed := tr.Caps().Failed; failed != nil && isClosed(failed) {
			c.Errorf("rank %d: Failed is closed while the transport works (Err = %v)", r, tr.Err())
		}
	}
}

// caseFailed: once rank 2 aborts, every rank's Failed channel closes (a
// lost rank is fatal to the job), and Err is set by then.
func caseFailed(c *Case) {
	if c.Ts[0].Caps().Failed == nil {
		c.Skip("the transport reports no Failed channel")
	}
	c.Ts[2].Abort(errors.New("conformance: aborted on purpose"))
	for r, tr := range c.Ts {
		select {
		case <-tr.Caps().Failed:
			if tr.Err() == nil {
				c.Errorf("rank %d: Failed closed with Err nil", r)
			}
		case <-c.Ctx.Done():
			c.Errorf("rank %d: Failed did not close after rank 2 aborted (Err = %v)", r, tr.Err())
		}
	}
}

// caseFailLocal: rank 0 fails on its own. Its pending requests and every
// later one fail with the cause, Err and Failed say so; no peer is told:
// rank 1's receive from rank 0 stays pending and ranks 1 and 2 go on.
// Rank 0's Close then says goodbye carrying the cause, which fails rank
// 1's receive naming rank 0.
func caseFailLocal(c *Case) {
	failLocal := c.Ts[0].Caps().FailLocal
	if failLocal == nil {
		c.Skip("the transport reports no FailLocal")
	}
	cause := errors.New("conformance: failed locally on purpose")
	own := c.Ts[0].Recv(1, tag(12, 1, 0), desc, nil)
	peer := c.Ts[1].Recv(0, tag(12, 1, 1), desc, nil)
	failLocal(cause)
	if err := c.wait(own); !errors.Is(err, cause) {
		c.Errorf("rank 0: pending receive after FailLocal: %v, want the cause", err)
	}
	for _, r := range []*transport.Request{c.Ts[0].Send(1, tag(12, 2, 0), desc, []byte("x")), c.Ts[0].Recv(2, tag(12, 2, 1), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, cause) {
			c.Errorf("rank 0: %v after FailLocal: %v, want the cause", r, err)
		}
	}
	if err := c.Ts[0].Err(); !errors.Is(err, cause) {
		c.Errorf("rank 0: Err after FailLocal = %v, want the cause", err)
	}
	if failed := c.Ts[0].Caps().Failed; failed != nil && !isClosed(failed) {
		c.Errorf("rank 0: Failed is open after FailLocal")
	}
	if err := c.waitShort(peer, pendingFor); !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("rank 1: its receive from rank 0 ended with %v after rank 0 failed locally, want it pending", err)
	}
	if err := c.roundTrip(1, 2, tag(12, 3, 0), 100<<10); err != nil {
		c.Errorf("ranks 1 and 2 after rank 0 failed locally: %v", err)
	}
	for r := 1; r < 3; r++ {
		if err := c.Ts[r].Err(); err != nil {
			c.Errorf("rank %d: rank 0's FailLocal failed it: %v", r, err)
		}
	}
	if err := c.Ts[0].Close(); err != nil {
		c.Errorf("rank 0: Close: %v", err)
	}
	if err := c.wait(peer); !namesPeer(err, 0) || !strings.Contains(err.Error(), cause.Error()) {
		c.Errorf("rank 1: its receive from rank 0 after rank 0 closed: %v, want a lost-peer error naming rank 0 and quoting the cause", err)
	}
}

// caseFailOpLocal: rank 0 fails operation (comm 13, seq 1) on its own.
// Its receives of the operation, pending and later, fail with the cause;
// rank 1's receive of the operation stays pending (no peer is told); the
// other operations go on and no transport fails.
func caseFailOpLocal(c *Case) {
	failOpLocal := c.Ts[0].Caps().FailOpLocal
	if failOpLocal == nil {
		c.Skip("the transport reports no FailOpLocal")
	}
	cause := errors.New("conformance: operation failed locally on purpose")
	own := c.Ts[0].Recv(1, tag(13, 1, 0), desc, nil)
	other := c.Ts[0].Recv(1, tag(13, 2, 0), desc, nil)
	peer := c.Ts[1].Recv(0, tag(13, 1, 1), desc, nil)
	failOpLocal(13, 1, cause)
	for _, r := range []*transport.Request{own, c.Ts[0].Recv(1, tag(13, 1, 2), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, cause) {
			c.Errorf("rank 0: %v of the operation failed locally: %v, want the cause", r, err)
		}
	}
	if err := c.waitShort(peer, pendingFor); !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("rank 1: its receive of the operation rank 0 failed locally ended with %v, want it pending", err)
	}
	t := tag(13, 2, 0)
	s := c.Ts[1].Send(0, t, desc, pattern(1, 0, t, 3000))
	c.check(0, expected{other, 1, nil, pattern(1, 0, t, 3000)})
	if err := c.wait(s); err != nil {
		c.Errorf("%v: %v", s, err)
	}
	if err := c.roundTrip(0, 1, tag(13, 3, 0), 100<<10); err != nil {
		c.Errorf("after FailOpLocal: %v", err)
	}
	for r, tr := range c.Ts {
		if err := tr.Err(); err != nil {
			c.Errorf("rank %d: FailOpLocal failed the transport: %v", r, err)
		}
	}
}

// caseSurvive: every rank switches to the per-peer failure model. Rank 3
// closes gracefully, which is no loss; rank 2 aborts, which is: ranks 0
// and 1 are told once each, their requests with rank 2 fail naming it,
// their receives from each other stay pending until the message comes,
// their transports stay up, and messages among them flow.
func caseSurvive(c *Case) {
	if c.Ts[0].Caps().Survive == nil {
		c.Skip("the transport reports no Survive")
	}
	logs := make([]*lossLog, len(c.Ts))
	for r, tr := range c.Ts {
		logs[r] = &lossLog{}
		tr.Caps().Survive(logs[r].report)
	}
	if err := c.Ts[3].Close(); err != nil {
		c.Errorf("rank 3: Close: %v", err)
	}
	from2 := [2]*transport.Request{c.Ts[0].Recv(2, tag(14, 1, 0), desc, nil), c.Ts[1].Recv(2, tag(14, 1, 1), desc, nil)}
	t := tag(14, 2, 0)
	from1 := c.Ts[0].Recv(1, t, desc, nil)
	c.Ts[2].Abort(errors.New("conformance: aborted on purpose"))
	for r, req := range from2 {
		if err := c.wait(req); !namesPeer(err, 2) {
			c.Errorf("rank %d: pending receive from the lost rank 2: %v, want a lost-peer error naming it", r, err)
		}
	}
	for r := range 2 {
		if !c.eventually(func() bool { return len(logs[r].peers()) > 0 }) {
			c.Errorf("rank %d: the loss of rank 2 was not reported", r)
		}
	}
	if err := c.waitShort(from1, pendingFor); !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("rank 0: its receive from rank 1 ended with %v after rank 2 was lost, want it pending", err)
	}
	s := c.Ts[1].Send(0, t, desc, pattern(1, 0, t, 5000))
	c.check(0, expected{from1, 1, nil, pattern(1, 0, t, 5000)})
	if err := c.wait(s); err != nil {
		c.Errorf("%v: %v", s, err)
	}
	for r := range 2 {
		if err := c.wait(c.Ts[r].Send(2, tag(14, 3, uint32(r)), desc, []byte("x"))); !namesPeer(err, 2) {
			c.Errorf("rank %d: a send to the lost rank 2: %v, want a lost-peer error naming it", r, err)
		}
		if err := c.Ts[r].Err(); err != nil {
			c.Errorf("rank %d: losing rank 2 failed the transport: %v", r, err)
		}
	}
	for i, n := range []int{10, 1 << 20} {
		if err := c.roundTrip(0, 1, tag(14, 4, uint32(10*i)), n); err != nil {
			c.Errorf("ranks 0 and 1 after rank 2 was lost: %v", err)
		}
	}
	for r := range 2 {
		if got := logs[r].peers(); len(got) != 1 || got[0] != 2 {
			c.Errorf("rank %d: lost was called for ranks %v, want [2] (once, and not for rank 3, which closed)", r, got)
		}
	}
}

// lossLog records the peers a transport reports lost, in order.
type lossLog struct {
	mu   sync.Mutex
	lost []int
}

func (l *lossLog) report(peer int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = append(l.lost, peer)
}

func (l *lossLog) peers() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.lost...)
}

// announced is which of the behaviours caps reports, as a bit set.
func announced(caps transport.Capabilities) int {
	n := 0
	for i, ok := range []bool{caps.Failed != nil, caps.FailLocal != nil, caps.FailOpLocal != nil, caps.Survive != nil} {
		if ok {
			n |= 1 << i
		}
	}
	return n
}

// describe names what caps reports, for messages.
func describe(caps transport.Capabilities) string {
	var s []string
	for i, name := range []string{"Failed", "FailLocal", "FailOpLocal", "Survive"} {
		if announced(caps)&(1<<i) != 0 {
			s = append(s, name)
		}
	}
	return strings.Join(append(s, "segments of "+strconv.Itoa(caps.SegmentBytes)), ", ")
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
