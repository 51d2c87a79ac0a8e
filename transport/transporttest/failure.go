package transporttest

import (
	"errors"
	"strings"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// namesPeer reports whether err is a lost-peer error naming peer.
func namesPeer(err error, peer int) bool {
	var pe *transport.PeerError
	return errors.As(err, &pe) && pe.Peer == peer && errors.Is(err, transport.ErrPeerLost)
}

// failedBy reports whether err is a FailOp relayed from peer, carrying
// cause's text.
func failedBy(err error, peer int, cause error) bool {
	var rf *transport.RemoteFailure
	return errors.As(err, &rf) && rf.Peer == peer && errors.Is(err, transport.ErrAborted) &&
		strings.Contains(rf.Reason, cause.Error())
}

// caseFailOp: rank 0 fails operation (comm 6, seq 1). Its receives of the
// operation, posted before and after, fail with the cause; so do the
// peers' (rank 2's from rank 1 included: every peer is told), naming rank
// 0 and quoting the cause. Late messages of the operation are dropped
// without harm, and the other operations, before and after, go on.
func caseFailOp(c *Case) {
	cause := errors.New("conformance: operation failed on purpose")
	failed := func(step uint32) transport.Tag { return tag(6, 1, step) }
	r01 := c.Ts[0].Recv(1, failed(0), desc, nil)
	r02 := c.Ts[0].Recv(2, failed(0), desc, nil)
	other := c.Ts[0].Recv(1, tag(6, 2, 0), desc, nil)
	q10 := c.Ts[1].Recv(0, failed(1), desc, nil)
	q21 := c.Ts[2].Recv(1, failed(2), desc, nil)
	c.Ts[0].FailOp(6, 1, cause)

	for _, r := range []*transport.Request{r01, r02, c.Ts[0].Recv(1, failed(9), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, cause) {
			c.Errorf("rank 0: %v of the failed operation: %v, want the cause", r, err)
		}
	}
	for rank, r := range map[int]*transport.Request{1: q10, 2: q21} {
		if err := c.wait(r); !failedBy(err, 0, cause) {
			c.Errorf("rank %d: %v of the operation rank 0 failed: %v, want a RemoteFailure from rank 0 quoting the cause", rank, r, err)
		}
	}
	if err := c.wait(c.Ts[1].Recv(0, failed(10), desc, nil)); !failedBy(err, 0, cause) {
		c.Errorf("rank 1: a receive of the failed operation posted later: %v, want a RemoteFailure from rank 0", err)
	}

	// Late messages of the failed operation, small and large, go nowhere.
	for i, n := range []int{10, 2 << 20} {
		t := failed(uint32(20 + i))
		if err := c.wait(c.Ts[1].Send(0, t, desc, pattern(1, 0, t, n))); err != nil {
			c.Errorf("rank 1: a %d-byte send of the failed operation: %v, want it to complete", n, err)
		}
	}
	t := tag(6, 2, 0)
	s := c.Ts[1].Send(0, t, desc, pattern(1, 0, t, 3000))
	c.check(0, expected{other, 1, nil, pattern(1, 0, t, 3000)})
	if err := c.wait(s); err != nil {
		c.Errorf("%v: %v", s, err)
	}
	for _, pair := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		if err := c.roundTrip(pair[0], pair[1], tag(6, 3, uint32(10*pair[0])), 100<<10); err != nil {
			c.Errorf("after FailOp: %v", err)
		}
	}
	for r, tr := range c.Ts {
		if err := tr.Err(); err != nil {
			c.Errorf("rank %d: FailOp failed the transport: %v", r, err)
		}
	}
}

// casePeerClose: rank 2 closes gracefully. What it sent before is still
// delivered; receives from it, pending and later, fail naming it, and so
// do sends to it; its own pending receive fails with ErrClosed; ranks 0
// and 1 go on among themselves, their transports intact.
func casePeerClose(c *Case) {
	gone := c.Ts[2]
	early := tag(7, 1, 0)
	if err := c.wait(gone.Send(0, early, desc, pattern(2, 0, early, 500))); err != nil {
		c.Fatalf("rank 2: %v", err)
	}
	large := tag(7, 1, 1)
	rl := c.Ts[0].Recv(2, large, desc, nil)
	if err := c.wait(gone.Send(0, large, desc, pattern(2, 0, large, 1<<20))); err != nil {
		c.Fatalf("rank 2: %v", err)
	}
	p0 := c.Ts[0].Recv(2, tag(7, 2, 0), desc, nil)
	p1 := c.Ts[1].Recv(2, tag(7, 2, 1), desc, make([]byte, 1<<20))
	mine := gone.Recv(0, tag(7, 3, 0), desc, nil)
	if err := gone.Close(); err != nil {
		c.Errorf("rank 2: Close: %v", err)
	}
	if err := c.wait(mine); !errors.Is(err, transport.ErrClosed) {
		c.Errorf("rank 2: its pending receive after Close: %v, want ErrClosed", err)
	}
	for rank, r := range map[int]*transport.Request{0: p0, 1: p1} {
		if err := c.wait(r); !namesPeer(err, 2) {
			c.Errorf("rank %d: pending receive from the closed rank 2: %v, want a lost-peer error naming rank 2", rank, err)
		}
	}
	c.check(0, expected{rl, 2, nil, pattern(2, 0, large, 1<<20)})
	c.check(0, expected{c.Ts[0].Recv(2, early, desc, nil), 2, nil, pattern(2, 0, early, 500)})
	if err := c.wait(c.Ts[0].Recv(2, tag(7, 4, 0), desc, nil)); !namesPeer(err, 2) {
		c.Errorf("rank 0: a receive from the closed rank 2 posted later: %v, want an error naming rank 2", err)
	}
	for _, n := range []int{10, 1 << 20} {
		t := tag(7, 5, uint32(n))
		if err := c.wait(c.Ts[1].Send(2, t, desc, pattern(1, 2, t, n))); !namesPeer(err, 2) {
			c.Errorf("rank 1: a %d-byte send to the closed rank 2: %v, want an error naming rank 2", n, err)
		}
	}
	for i, n := range []int{10, 1 << 20} {
		if err := c.roundTrip(0, 1, tag(7, 6, uint32(10*i)), n); err != nil {
			c.Errorf("ranks 0 and 1 after rank 2 closed: %v", err)
		}
	}
	for r := range 2 {
		if err := c.Ts[r].Err(); err != nil {
			c.Errorf("rank %d: a peer's graceful close failed the transport: %v", r, err)
		}
	}
	for _, r := range []*transport.Request{gone.Send(0, tag(7, 7, 0), desc, []byte("x")), gone.Recv(0, tag(7, 7, 1), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, transport.ErrClosed) {
			c.Errorf("rank 2: %v after Close: %v, want ErrClosed", r, err)
		}
	}
}

// caseAbort: rank 2 aborts. Its pending requests and every later one fail
// with the cause; ranks 0 and 1 see it lost: their pending receives fail,
// those from rank 1 included, with an error naming rank 2, and their
// transports fail (a lost rank is fatal to the job).
func caseAbort(c *Case) {
	cause := errors.New("conformance: aborted on purpose")
	gone := c.Ts[2]
	p01 := c.Ts[0].Recv(1, tag(8, 1, 0), desc, nil)
	p02 := c.Ts[0].Recv(2, tag(8, 1, 1), desc, nil)
	p12 := c.Ts[1].Recv(2, tag(8, 1, 2), desc, nil)
	own := gone.Recv(0, tag(8, 2, 0), desc, nil)
	big := gone.Send(0, tag(8, 3, 0), desc, pattern(2, 0, tag(8, 3, 0), 8<<20))
	gone.Abort(cause)
	if err := c.wait(own); !errors.Is(err, cause) {
		c.Errorf("rank 2: pending receive after Abort: %v, want the cause", err)
	}
	if err := c.wait(big); err != nil && !errors.Is(err, cause) {
		c.Errorf("rank 2: pending send after Abort: %v, want nil (sent) or the cause", err)
	}
	for _, r := range []*transport.Request{gone.Send(0, tag(8, 4, 0), desc, []byte("x")), gone.Recv(1, tag(8, 4, 1), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, cause) {
			c.Errorf("rank 2: %v after Abort: %v, want the cause", r, err)
		}
	}
	if err := gone.Err(); !errors.Is(err, cause) {
		c.Errorf("rank 2: Err after Abort = %v, want the cause", err)
	}
	for rank, r := range map[string]*transport.Request{"0 from rank 1": p01, "0 from rank 2": p02, "1 from rank 2": p12} {
		if err := c.wait(r); !namesPeer(err, 2) {
			c.Errorf("rank %s: pending receive after rank 2 aborted: %v, want a lost-peer error naming rank 2", rank, err)
		}
	}
	for r := range 2 {
		tr := c.Ts[r]
		if !c.eventually(func() bool { return namesPeer(tr.Err(), 2) }) {
			c.Errorf("rank %d: Err = %v, want a lost-peer error naming rank 2", r, tr.Err())
		}
		if err := c.wait(tr.Recv(1-r, tag(8, 5, 0), desc, nil)); !namesPeer(err, 2) {
			c.Errorf("rank %d: a receive posted after rank 2 aborted: %v, want an error naming rank 2", r, err)
		}
	}
}

// caseClose: Close fails this rank's pending requests with ErrClosed and
// later ones too, returns once its work is done (within the deadline),
// and may be called again.
func caseClose(c *Case) {
	tr := c.Ts[0]
	r := tr.Recv(1, tag(9, 1, 0), desc, nil)
	s := tr.Send(1, tag(9, 2, 0), desc, pattern(0, 1, tag(9, 2, 0), 8<<20))
	start := time.Now()
	if err := tr.Close(); err != nil {
		c.Errorf("Close: %v", err)
	}
	c.Logf("Close took %v", time.Since(start))
	if err := c.wait(r); !errors.Is(err, transport.ErrClosed) {
		c.Errorf("pending receive after Close: %v, want ErrClosed", err)
	}
	if err := c.wait(s); err != nil && !errors.Is(err, transport.ErrClosed) {
		c.Errorf("pending send after Close: %v, want nil (sent) or ErrClosed", err)
	}
	for _, r := range []*transport.Request{tr.Send(1, tag(9, 3, 0), desc, []byte("x")), tr.Recv(1, tag(9, 3, 1), desc, nil)} {
		if err := c.wait(r); !errors.Is(err, transport.ErrClosed) {
			c.Errorf("%v after Close: %v, want ErrClosed", r, err)
		}
	}
	if err := tr.Err(); !errors.Is(err, transport.ErrClosed) {
		c.Errorf("Err after Close = %v, want ErrClosed", err)
	}
	if err := tr.Close(); err != nil {
		c.Errorf("second Close: %v", err)
	}
}

// caseMismatch: a message whose descriptor differs from its receive's
// fails the receive with a MismatchError naming both ranks and both
// descriptors, small or large, arrived before the receive or after; a
// message of another kind for the operation fails its receives even at a
// step this rank never posts. The receiver then fails the operation, as
// the collectives do, and the sender's receive of it fails quoting both
// sides. The sends complete, and the transports stay usable.
func caseMismatch(c *Case) {
	recv, send := c.Ts[0], c.Ts[1]
	other := desc
	other.Count++
	for i, n := range []int{16, 2 << 20} {
		for _, before := range []bool{true, false} {
			t := tag(10, uint64(1+i), 0)
			if !before {
				t.Step = 1
			}
			var r *transport.Request
			if before {
				r = recv.Recv(1, t, desc, nil)
			}
			s := send.Send(0, t, other, pattern(1, 0, t, n))
			if !before {
				time.Sleep(20 * time.Millisecond)
				r = recv.Recv(1, t, desc, nil)
			}
			c.checkMismatch(r, desc, other)
			if err := c.wait(s); err != nil {
				c.Errorf("rank 1: the mismatched %d-byte send: %v, want it to complete", n, err)
			}
		}
	}
	// Another kind for the operation, at a step rank 0 never posts: the
	// receive fails, whether its buffer is small or large (a transport
	// may have offered a large one to the sender already).
	barrier := transport.Desc{Kind: transport.OpBarrier, Algo: 1}
	seq := uint64(5)
	for _, buf := range [][]byte{nil, make([]byte, 2<<20)} {
		for _, n := range []int{1, 2 << 20} {
			r := recv.Recv(1, tag(10, seq, 0), desc, buf)
			s := send.Send(0, tag(10, seq, 77), barrier, pattern(1, 0, tag(10, seq, 77), n))
			c.checkMismatch(r, desc, barrier)
			if err := c.wait(s); err != nil {
				c.Errorf("rank 1: the %d-byte message of another kind: %v, want it to complete", n, err)
			}
			seq++
		}
	}

	// The receiver fails the operation; the sender hears of it.
	q := send.Recv(0, tag(10, 1, 5), other, nil)
	r := recv.Recv(1, tag(10, 1, 6), desc, nil)
	send.Send(0, tag(10, 1, 6), other, []byte("y"))
	err := c.wait(r)
	recv.FailOp(10, 1, err)
	if err := c.wait(q); !failedBy(err, 0, errors.New("rank 0")) || !strings.Contains(err.Error(), "rank 1") || !errors.Is(err, transport.ErrMismatch) {
		c.Errorf("rank 1: after rank 0 failed the mismatched operation: %v, want a RemoteFailure of a mismatch naming both ranks", err)
	}
	if err := c.roundTrip(0, 1, tag(10, 9, 0), 1000); err != nil {
		c.Errorf("after the mismatches: %v", err)
	}
}

// checkMismatch checks that r failed with a MismatchError of rank 0
// (descriptor local) against rank 1 (remote).
func (c *Case) checkMismatch(r *transport.Request, local, remote transport.Desc) {
	c.Helper()
	err := c.wait(r)
	var me *transport.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, transport.ErrMismatch) {
		c.Errorf("%v: %v, want a MismatchError", r, err)
		return
	}
	if me.Rank != 0 || me.Peer != 1 || me.Local != local || me.Remote != remote {
		c.Errorf("%v: mismatch %+v, want rank 0 with %v against rank 1 with %v", r, me, local, remote)
	}
}
