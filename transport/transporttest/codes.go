package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sparcml/sparcml/transport"
)

// codedFailures is a failure of each code, as a rank detects it.
func codedFailures() map[transport.Code]error {
	return map[transport.Code]error{
		transport.CodeUnknown:  errors.New("conformance: a failure of no kind"),
		transport.CodeInvalid:  fmt.Errorf("%w: conformance: a null buffer", transport.ErrInvalid),
		transport.CodeMismatch: fmt.Errorf("%w: conformance: rank 0 called allreduce", transport.ErrMismatch),
		transport.CodePeerLost: &transport.PeerError{Peer: 2, Kind: transport.ErrPeerLost, Err: errors.New("conformance: gone")},
		transport.CodeTimeout:  fmt.Errorf("%w while waiting for conformance", context.DeadlineExceeded),
		transport.CodeAborted:  fmt.Errorf("%w: conformance", transport.ErrAborted),
		transport.CodeClosed:   fmt.Errorf("conformance: %w", transport.ErrClosed),
		transport.CodeCanceled: fmt.Errorf("conformance: %w", context.Canceled),
		transport.CodeProtocol: &transport.PeerError{Peer: 1, Kind: transport.ErrProtocol, Err: errors.New("conformance: bad frame")},
		transport.CodeRevoked:  fmt.Errorf("%w by rank 0 (conformance)", transport.ErrRevoked),
	}
}

// caseFailOpCodes: rank 0 fails one operation with a failure of each
// code. Every peer's receive of it fails with a RemoteFailure of that
// code from rank 0 that errors.Is matches against the code's sentinel
// and ErrAborted, and against no other sentinel. A failure rank 1
// relays names rank 0, once; a code this build does not know arrives
// as it was sent and matches ErrAborted only.
func caseFailOpCodes(c *Case) {
	failures := codedFailures()
	failures[transport.Code(250)] = &transport.RemoteFailure{Peer: 0, Code: 250, Reason: "conformance: from a newer build"}
	seq := uint64(0)
	for code, cause := range failures {
		seq++
		q1 := c.Ts[1].Recv(0, tag(7, seq, 0), desc, nil)
		q2 := c.Ts[2].Recv(1, tag(7, seq, 1), desc, nil)
		c.Ts[0].FailOp(7, seq, cause)
		for rank, q := range map[int]*transport.Request{1: q1, 2: q2} {
			c.checkCoded(rank, q, 0, code, cause)
		}
	}

	// Rank 1 relays what rank 0 told it to rank 2, under another seq.
	cause := failures[transport.CodeMismatch]
	q1 := c.Ts[1].Recv(0, tag(7, 100, 0), desc, nil)
	q2 := c.Ts[2].Recv(0, tag(7, 101, 0), desc, nil)
	c.Ts[0].FailOp(7, 100, cause)
	err := c.wait(q1)
	c.Ts[1].FailOp(7, 101, err)
	c.checkCoded(2, q2, 0, transport.CodeMismatch, cause)
	if err := c.wait(q2); strings.Count(err.Error(), "failed by rank") != 1 {
		c.Errorf("rank 2: a failure rank 1 relayed: %q, want rank 0 named once", err)
	}
	for r, tr := range c.Ts {
		if err := tr.Err(); err != nil {
			c.Errorf("rank %d: FailOp failed the transport: %v", r, err)
		}
	}
}

// checkCoded checks that r, on rank, failed with a RemoteFailure from
// origin of code, quoting cause, classified by the code alone.
func (c *Case) checkCoded(rank int, r *transport.Request, origin int, code transport.Code, cause error) {
	c.Helper()
	err := c.wait(r)
	var rf *transport.RemoteFailure
	if !errors.As(err, &rf) || rf.Peer != origin || rf.Code != code || transport.CodeOf(err) != code {
		c.Errorf("rank %d: %v: %v (%#v), want a RemoteFailure of code %v from rank %d", rank, r, err, rf, code, origin)
		return
	}
	want := cause.Error()
	if relayed, ok := cause.(*transport.RemoteFailure); ok {
		want = relayed.Reason
	}
	if rf.Reason != want {
		c.Errorf("rank %d: %v: reason %q, want %q", rank, r, rf.Reason, want)
	}
	if !errors.Is(err, transport.ErrAborted) {
		c.Errorf("rank %d: %v: %v does not match ErrAborted", rank, r, err)
	}
	for other := transport.Code(1); other.Known(); other++ {
		if s := other.Err(); s != transport.ErrAborted && errors.Is(err, s) != (other == code) {
			c.Errorf("rank %d: %v: a failure of code %v: errors.Is(err, %v) = %v", rank, r, code, s, errors.Is(err, s))
		}
	}
}
