package transport

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

var desc = Desc{Kind: OpAllreduce, DType: 1, Count: 8}

func tagOf(seq uint64, step uint32) Tag { return Tag{Comm: 1, Seq: seq, Step: step} }

func wait(t *testing.T, r *Request) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v did not complete", r)
	}
	return err
}

// deliver plays a stream transport: header, then payload into Claim's
// destination.
func deliver(t *testing.T, m *Matcher, peer int, tag Tag, d Desc, payload []byte) {
	t.Helper()
	c, err := m.Claim(peer, tag, d, len(payload))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	copy(c.Dst(), payload)
	c.Finish()
}

func TestPostedBeforeArrivalLandsInBuffer(t *testing.T) {
	m := NewMatcher(0, 0)
	buf := make([]byte, 16)
	r := m.Post(1, tagOf(1, 0), desc, buf)
	deliver(t, m, 1, tagOf(1, 0), desc, []byte("hello"))
	if err := wait(t, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Data(), []byte("hello")) || &r.Data()[0] != &buf[0] {
		t.Fatalf("payload %q not delivered into the posted buffer", r.Data())
	}
}

func TestArrivalBeforePostIsCopied(t *testing.T) {
	m := NewMatcher(0, 0)
	deliver(t, m, 2, tagOf(3, 1), desc, []byte("early"))
	if p, u := m.Pending(); p != 0 || u != 1 {
		t.Fatalf("pending %d posted %d unexpected, want 0 and 1", p, u)
	}
	small := make([]byte, 2) // too small: the matcher hands its own buffer over
	r := m.Post(2, tagOf(3, 1), desc, small)
	if err := wait(t, r); err != nil || string(r.Data()) != "early" {
		t.Fatalf("got %q, %v", r.Data(), err)
	}
	if p, u := m.Pending(); p != 0 || u != 0 {
		t.Fatalf("left %d posted, %d unexpected", p, u)
	}
}

func TestTagsDoNotMix(t *testing.T) {
	m := NewMatcher(0, 0)
	a := m.Post(1, tagOf(1, 0), desc, nil)
	b := m.Post(1, tagOf(2, 0), desc, nil)
	c := m.Post(2, tagOf(1, 0), desc, nil)
	deliver(t, m, 1, tagOf(2, 0), desc, []byte("b"))
	deliver(t, m, 2, tagOf(1, 0), desc, []byte("c"))
	deliver(t, m, 1, tagOf(1, 0), desc, []byte("a"))
	for want, r := range map[string]*Request{"a": a, "b": b, "c": c} {
		if err := wait(t, r); err != nil || string(r.Data()) != want {
			t.Fatalf("want %q, got %q, %v", want, r.Data(), err)
		}
	}
}

func TestDescriptorMismatchNamesBothSides(t *testing.T) {
	m := NewMatcher(3, 0)
	r := m.Post(1, tagOf(7, 0), desc, nil)
	other := desc
	other.Count = 9
	deliver(t, m, 1, tagOf(7, 0), other, make([]byte, 4))
	err := wait(t, r)
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
		t.Fatalf("want a MismatchError, got %v", err)
	}
	if me.Rank != 3 || me.Peer != 1 || me.Local != desc || me.Remote != other {
		t.Fatalf("mismatch error lacks a side: %+v", me)
	}
	// The same check applies to a message that arrived first.
	deliver(t, m, 2, tagOf(8, 0), other, nil)
	if err := wait(t, m.Post(2, tagOf(8, 0), desc, nil)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("early message: want mismatch, got %v", err)
	}
}

// TestKindPerOperation: once a rank runs one kind at a sequence number, a
// message of another kind for that operation fails its receives, even at
// a step this rank never posts, and whether it arrived before or after
// the first receive. Kinds are compared for equality only: the matcher
// knows no pair of kinds that may share an operation.
func TestKindPerOperation(t *testing.T) {
	sparse := Desc{Kind: OpSparseAllreduce, DType: 1, Count: 8}
	m := NewMatcher(0, 0)
	r := m.Post(1, tagOf(4, 0), sparse, nil)
	deliver(t, m, 1, tagOf(4, 99), desc, []byte("dense"))
	if err := wait(t, r); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a dense allreduce's message in a sparse allreduce: %v, want a mismatch", err)
	}
	deliver(t, m, 2, tagOf(5, 99), desc, []byte("early"))
	if err := wait(t, m.Post(2, tagOf(5, 0), sparse, nil)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("an early message of another kind: %v, want a mismatch", err)
	}
	ok := m.Post(1, tagOf(6, 0), sparse, nil)
	deliver(t, m, 1, tagOf(6, 0), sparse, []byte("same"))
	if err := wait(t, ok); err != nil || string(ok.Data()) != "same" {
		t.Fatalf("same kind: %q, %v", ok.Data(), err)
	}
}

func TestFailOpFailsOnlyThatOperation(t *testing.T) {
	m := NewMatcher(0, 0)
	deliver(t, m, 1, tagOf(5, 1), desc, []byte("x")) // early message of the failed op
	victim := m.Post(1, tagOf(5, 0), desc, nil)
	bystander := m.Post(1, tagOf(6, 0), desc, nil)
	cause := errors.New("cancelled")
	m.FailOp(1, 5, cause)
	if err := wait(t, victim); !errors.Is(err, cause) {
		t.Fatalf("posted receive of the failed op: %v", err)
	}
	if err := wait(t, m.Post(1, tagOf(5, 1), desc, nil)); !errors.Is(err, cause) {
		t.Fatalf("later receive of the failed op: %v", err)
	}
	// A late message of the failed op is discarded, not kept.
	c, err := m.Claim(1, tagOf(5, 2), desc, 4)
	if err != nil || c.Dst() != nil {
		t.Fatalf("late message of a failed op: dst %v, %v", c.Dst(), err)
	}
	c.Finish()
	deliver(t, m, 1, tagOf(6, 0), desc, []byte("ok"))
	if err := wait(t, bystander); err != nil || string(bystander.Data()) != "ok" {
		t.Fatalf("other operation: %q, %v", bystander.Data(), err)
	}
	if p, u := m.Pending(); p != 0 || u != 0 {
		t.Fatalf("left %d posted, %d unexpected", p, u)
	}
}

func TestFailPeerKeepsEarlierMessages(t *testing.T) {
	m := NewMatcher(0, 0)
	deliver(t, m, 1, tagOf(1, 0), desc, []byte("sent before closing"))
	gone := errors.New("rank 1 closed")
	pending := m.Post(1, tagOf(2, 0), desc, nil)
	other := m.Post(2, tagOf(2, 0), desc, nil)
	m.FailPeer(1, gone)
	if err := wait(t, pending); !errors.Is(err, gone) {
		t.Fatalf("pending receive from the closed peer: %v", err)
	}
	if r := m.Post(1, tagOf(1, 0), desc, nil); wait(t, r) != nil || string(r.Data()) != "sent before closing" {
		t.Fatalf("a message delivered before the close must still be received: %q", r.Data())
	}
	if err := wait(t, m.Post(1, tagOf(3, 0), desc, nil)); !errors.Is(err, gone) {
		t.Fatalf("later receive from the closed peer: %v", err)
	}
	deliver(t, m, 2, tagOf(2, 0), desc, []byte("y"))
	if err := wait(t, other); err != nil {
		t.Fatalf("receive from a live peer: %v", err)
	}
}

func TestAbortIsSticky(t *testing.T) {
	m := NewMatcher(0, 0)
	r := m.Post(1, tagOf(1, 0), desc, nil)
	cause := errors.New("peer died")
	m.Abort(cause)
	m.Abort(errors.New("second cause is ignored"))
	if err := wait(t, r); !errors.Is(err, cause) {
		t.Fatalf("pending: %v", err)
	}
	if err := wait(t, m.Post(2, tagOf(2, 0), desc, nil)); !errors.Is(err, cause) {
		t.Fatalf("later: %v", err)
	}
	if _, err := m.Claim(1, tagOf(3, 0), desc, 1); !errors.Is(err, cause) {
		t.Fatalf("claim after abort: %v", err)
	}
}

func TestDuplicateTags(t *testing.T) {
	m := NewMatcher(0, 0)
	m.Post(1, tagOf(1, 0), desc, nil)
	if err := wait(t, m.Post(1, tagOf(1, 0), desc, nil)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second receive with one tag: %v", err)
	}
	deliver(t, m, 2, tagOf(1, 0), desc, nil)
	if _, err := m.Claim(2, tagOf(1, 0), desc, 0); !errors.Is(err, ErrProtocol) {
		t.Fatalf("second message with one tag: %v", err)
	}
}

// The per-peer budget blocks the reader of a peer that floods unexpected
// messages, without blocking other peers, until receives drain it.
func TestUnexpectedBudgetBackPressure(t *testing.T) {
	m := NewMatcher(0, 100)
	deliver(t, m, 1, tagOf(1, 0), desc, make([]byte, 80))
	blocked := make(chan struct{})
	go func() {
		deliver(t, m, 1, tagOf(1, 1), desc, make([]byte, 80)) // over budget: waits
		close(blocked)
	}()
	select {
	case <-blocked:
		t.Fatal("a message over the budget was accepted")
	case <-time.After(50 * time.Millisecond):
	}
	deliver(t, m, 2, tagOf(1, 0), desc, make([]byte, 80)) // another peer is not blocked
	if err := wait(t, m.Post(1, tagOf(1, 0), desc, nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("draining the budget did not unblock the reader")
	}
	// A single message larger than the whole budget still passes when
	// nothing else from that peer waits.
	deliver(t, m, 3, tagOf(1, 0), desc, make([]byte, 1000))
}

// A reader blocked on the budget while holding the header of a message
// whose receive is then posted must deliver it.
func TestPostWakesBlockedReader(t *testing.T) {
	m := NewMatcher(0, 10)
	deliver(t, m, 1, tagOf(1, 0), desc, make([]byte, 10))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deliver(t, m, 1, tagOf(2, 0), desc, []byte("wanted"))
	}()
	time.Sleep(20 * time.Millisecond)
	r := m.Post(1, tagOf(2, 0), desc, nil)
	if err := wait(t, r); err != nil || string(r.Data()) != "wanted" {
		t.Fatalf("got %q, %v", r.Data(), err)
	}
	wg.Wait()
}

func TestInMemoryLostPeer(t *testing.T) {
	ts := NewInMemory(3)
	r := ts[0].Recv(2, tagOf(1, 0), desc, nil)
	ts[2].Abort(errors.New("killed"))
	err := wait(t, r)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, ErrPeerLost) {
		t.Fatalf("want a PeerError naming rank 2, got %v", err)
	}
	if err := wait(t, ts[1].Send(0, tagOf(1, 0), desc, []byte("x"))); !errors.Is(err, ErrPeerLost) {
		t.Fatalf("send to a rank whose transport failed: %v", err)
	}
}

func TestRequestTestAndDone(t *testing.T) {
	r := NewRequest(1, tagOf(1, 0), true)
	if done, _ := r.Test(); done {
		t.Fatal("new request is complete")
	}
	if !r.Complete([]byte("a"), nil) || r.Complete(nil, errors.New("late")) {
		t.Fatal("only the first Complete counts")
	}
	<-r.Done()
	if done, err := r.Test(); !done || err != nil || string(r.Data()) != "a" {
		t.Fatalf("Test after completion: %v %v %q", done, err, r.Data())
	}
}

func TestBufPoolSizes(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 1 << 20} {
		b := GetBuf(n)
		if len(b) != n {
			t.Fatalf("GetBuf(%d) has length %d", n, len(b))
		}
		PutBuf(b)
	}
}

// TestClaimContext: a claim waiting for the budget gives up when its
// context ends, and the budget it waited for is untouched.
func TestClaimContext(t *testing.T) {
	m := NewMatcher(0, 10)
	deliver(t, m, 1, tagOf(1, 0), desc, make([]byte, 10))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := m.ClaimContext(ctx, 1, tagOf(2, 0), desc, 10)
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("a claim over the budget returned at once: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ClaimContext after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ClaimContext did not give up when its context ended")
	}
	if err := wait(t, m.Post(1, tagOf(1, 0), desc, nil)); err != nil {
		t.Fatal(err)
	}
	c, err := m.ClaimContext(context.Background(), 1, tagOf(2, 0), desc, 10)
	if err != nil || c.Dst() == nil {
		t.Fatalf("claim with the budget free: %v", err)
	}
	c.Finish()
}

// TestCheckKindAndKindMismatch: a message of another kind, announced
// (CheckKind) or claimed, fails the operation's posted receives and says
// so; one of the operation's own kind passes.
func TestCheckKindAndKindMismatch(t *testing.T) {
	m := NewMatcher(0, 0)
	barrier := Desc{Kind: OpBarrier}
	r := m.Post(1, tagOf(1, 0), desc, nil)
	if m.CheckKind(1, tagOf(1, 5), desc) {
		t.Fatal("CheckKind: a message of the operation's own kind reported as a mismatch")
	}
	if !m.CheckKind(1, tagOf(1, 5), barrier) {
		t.Fatal("CheckKind: a message of another kind passed")
	}
	if err := wait(t, r); !errors.Is(err, ErrMismatch) {
		t.Fatalf("posted receive after CheckKind: %v, want a mismatch", err)
	}
	r = m.Post(1, tagOf(2, 0), desc, nil)
	c, err := m.Claim(1, tagOf(2, 3), barrier, 4)
	if err != nil || !c.KindMismatch() || c.Dst() != nil {
		t.Fatalf("claim of another kind: %v, mismatch %v, dst %v", err, c.KindMismatch(), c.Dst())
	}
	if err := wait(t, r); !errors.Is(err, ErrMismatch) {
		t.Fatalf("posted receive after the claim: %v, want a mismatch", err)
	}
	if m.CheckKind(2, tagOf(3, 0), barrier) {
		t.Fatal("CheckKind for an operation this rank has not started reported a mismatch")
	}
}

// TestClaimedFail: a claimed message whose payload will not come fails its
// receive, or gives its budget back.
func TestClaimedFail(t *testing.T) {
	m := NewMatcher(0, 10)
	r := m.Post(1, tagOf(1, 0), desc, make([]byte, 8))
	c, err := m.Claim(1, tagOf(1, 0), desc, 8)
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("sender closed")
	c.Fail(gone)
	if err := wait(t, r); !errors.Is(err, gone) {
		t.Fatalf("receive after Fail: %v", err)
	}
	u, err := m.Claim(1, tagOf(2, 0), desc, 10) // unexpected: takes the whole budget
	if err != nil {
		t.Fatal(err)
	}
	u.Fail(gone)
	if p, n := m.Pending(); p != 0 || n != 0 {
		t.Fatalf("after Fail: %d posted, %d unexpected", p, n)
	}
	if _, err := m.TryClaim(1, tagOf(3, 0), desc, 10); err != nil {
		t.Fatalf("the failed message's budget was not given back: %v", err)
	}
}
