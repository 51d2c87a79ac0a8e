package transport

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies a failure. It is what a failure carries between ranks
// (FailOp) next to its text, so that every rank classifies a failure a
// peer detected by the code it detected it with, never by its text: a
// mismatch rank 0 detected is errors.Is(err, ErrMismatch) on rank 3 too.
// Its values are wire values: they never change meaning, and new codes
// take new numbers. A code this build does not know (from a newer peer)
// is a generic remote failure.
type Code uint8

// Codes, one per sentinel a failure can be classified by.
const (
	CodeUnknown  Code = 0  // no sentinel: a failure not classified
	CodeInvalid  Code = 1  // ErrInvalid
	CodeMismatch Code = 2  // ErrMismatch
	CodePeerLost Code = 3  // ErrPeerLost
	CodeTimeout  Code = 4  // context.DeadlineExceeded
	CodeAborted  Code = 5  // ErrAborted
	CodeClosed   Code = 6  // ErrClosed
	CodeCanceled Code = 7  // context.Canceled
	CodeProtocol Code = 8  // ErrProtocol
	CodeRevoked  Code = 9  // ErrRevoked
	numCodes     Code = 10 // the first code this build does not know
)

// sentinels is each known code's sentinel, in the order CodeOf tries
// them: a failure that wraps several is classified by the first. A lost
// peer or a revocation explains a failure better than the abort that
// followed it.
var sentinels = []struct {
	code Code
	err  error
}{
	{CodeMismatch, ErrMismatch},
	{CodePeerLost, ErrPeerLost},
	{CodeProtocol, ErrProtocol},
	{CodeRevoked, ErrRevoked},
	{CodeTimeout, context.DeadlineExceeded},
	{CodeInvalid, ErrInvalid},
	{CodeClosed, ErrClosed},
	{CodeAborted, ErrAborted},
	{CodeCanceled, context.Canceled},
}

// Err is c's sentinel, nil for CodeUnknown and codes this build does not
// know.
func (c Code) Err() error {
	for _, s := range sentinels {
		if s.code == c {
			return s.err
		}
	}
	return nil
}

// Known reports whether this build knows c.
func (c Code) Known() bool { return c < numCodes }

func (c Code) String() string {
	switch c {
	case CodeUnknown:
		return "unknown"
	case CodeInvalid:
		return "invalid"
	case CodeMismatch:
		return "mismatch"
	case CodePeerLost:
		return "peer-lost"
	case CodeTimeout:
		return "timeout"
	case CodeAborted:
		return "aborted"
	case CodeClosed:
		return "closed"
	case CodeCanceled:
		return "canceled"
	case CodeProtocol:
		return "protocol"
	case CodeRevoked:
		return "revoked"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// CodeOf classifies err: the code a peer sent with a failure it relayed
// (RemoteFailure), else the first sentinel err wraps, else CodeUnknown.
func CodeOf(err error) Code {
	if err == nil {
		return CodeUnknown
	}
	var rf *RemoteFailure
	if errors.As(err, &rf) {
		return rf.Code
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	return CodeUnknown
}
