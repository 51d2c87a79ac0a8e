//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sparcml/sparcml/transport"
)

// Every code this build knows has a status, and an error of that code
// gets it whether it wraps the code's sentinel or came from another
// rank; a failure relayed from another rank is SPARCML_ERR_ABORTED unless
// it holds for every rank alike (a mismatch, a deadline), as
// include/sparcml.h says.
func TestStatusByCode(t *testing.T) {
	remoteSame := map[transport.Code]bool{transport.CodeMismatch: true, transport.CodeTimeout: true}
	for code := transport.Code(1); code.Known(); code++ {
		want, ok := statusOfCode[code]
		if !ok {
			t.Fatalf("code %v has no status", code)
		}
		local := fmt.Errorf("rank 1 failed: %w", code.Err())
		if got := statusOf(local); got != want {
			t.Errorf("a local %v failure: status %d, want %d", code, got, want)
		}
		remote := &transport.Error{Rank: 2, Peer: 1, Op: "allreduce", Seq: 3,
			Err: &transport.RemoteFailure{Peer: 1, Code: code, Reason: "rank 1 failed"}}
		wantRemote := want
		if !remoteSame[code] {
			wantRemote = statusAborted
		}
		if got := statusOf(remote); got != wantRemote {
			t.Errorf("a %v failure from rank 1: status %d, want %d", code, got, wantRemote)
		}
	}
	// The text of a reason does not matter, only its code.
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&transport.RemoteFailure{Peer: 1, Code: transport.CodeAborted, Reason: transport.ErrMismatch.Error()}, statusAborted},
		{&transport.RemoteFailure{Peer: 1, Code: transport.CodeAborted, Reason: context.DeadlineExceeded.Error()}, statusAborted},
		{&transport.RemoteFailure{Peer: 1, Code: 200, Reason: "from a newer build"}, statusAborted},
		{errors.New(transport.ErrMismatch.Error()), statusInternal},
		{fmt.Errorf("%w: wait", errNotDone), statusNotDone},
		{fmt.Errorf("%w: %w", errInit, context.DeadlineExceeded), statusInit},
		{nil, statusOK},
	} {
		if got := statusOf(tc.err); int(got) != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
