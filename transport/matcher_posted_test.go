package transport

import (
	"errors"
	"testing"
)

// TestClaimPosted: a message with no posted receive is left alone (no
// budget taken, nothing filed), and is claimed into the receive's buffer
// once it is posted; a failed operation's message is claimed to be
// dropped, one of another kind fails the operation's receives.
func TestClaimPosted(t *testing.T) {
	m := NewMatcher(0, 100)
	d := Desc{Kind: OpAllreduce, Count: 5}
	tag := Tag{Comm: 1, Seq: 1, Step: 2}
	if _, ok, err := m.ClaimPosted(1, tag, d, 1000); ok || err != nil {
		t.Fatalf("ClaimPosted with no receive posted: ok %v, %v", ok, err)
	}
	if posted, unexp := m.Pending(); posted != 0 || unexp != 0 {
		t.Fatalf("ClaimPosted with no receive filed something: %d posted, %d unexpected", posted, unexp)
	}
	buf := make([]byte, 1000)
	req := m.Post(1, tag, d, buf)
	c, ok, err := m.ClaimPosted(1, tag, d, 1000)
	if !ok || err != nil || &c.Dst()[0] != &buf[0] {
		t.Fatalf("ClaimPosted for a posted receive: ok %v, %v, or not its buffer", ok, err)
	}
	c.Dst()[999] = 7
	c.Finish()
	if err := req.Wait(t.Context()); err != nil || req.Data()[999] != 7 {
		t.Fatalf("the claimed receive: %v", err)
	}

	cause := errors.New("failed")
	m.FailOp(1, 2, cause)
	if c, ok, err := m.ClaimPosted(1, Tag{Comm: 1, Seq: 2}, d, 10); !ok || err != nil || c.Dst() != nil {
		t.Fatalf("ClaimPosted for a failed operation: ok %v, %v, dst %v; want a claim to drop", ok, err, c.Dst())
	}

	r := m.Post(1, Tag{Comm: 1, Seq: 3}, d, nil)
	other := Desc{Kind: OpBarrier}
	if c, ok, _ := m.ClaimPosted(1, Tag{Comm: 1, Seq: 3, Step: 9}, other, 10); !ok || !c.KindMismatch() {
		t.Fatalf("ClaimPosted of another kind: ok %v, mismatch %v", ok, c.KindMismatch())
	}
	var me *MismatchError
	if err := r.Wait(t.Context()); !errors.As(err, &me) {
		t.Fatalf("the operation's receive after a message of another kind: %v", err)
	}

	m.Abort(ErrClosed)
	if _, _, err := m.ClaimPosted(1, Tag{Comm: 2}, d, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("ClaimPosted after Abort: %v", err)
	}
}
