package transport

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrPeerLost: a peer closed its connection or died.
	ErrPeerLost = errors.New("peer lost")
	// ErrMismatch: ranks called different collectives, or the same one
	// with different arguments, at the same sequence number.
	ErrMismatch = errors.New("collective mismatch")
	// ErrAborted: Abort was called on this rank or a peer failed the
	// operation.
	ErrAborted = errors.New("aborted")
	// ErrClosed: the transport was closed.
	ErrClosed = errors.New("transport closed")
	// ErrProtocol: a peer sent a malformed, oversized or wrong-version frame.
	ErrProtocol = errors.New("protocol error")
	// ErrInvalid: bad arguments.
	ErrInvalid = errors.New("invalid argument")
	// ErrRevoked: the communicator was revoked. Every rank learns of a
	// revocation by itself, so an operation failing with it does not
	// fail the operation on the other ranks (as ErrPeerLost).
	ErrRevoked = errors.New("communicator revoked")
)

// PeerError says which peer failed and why. It wraps ErrPeerLost (or
// ErrProtocol) and the underlying cause.
type PeerError struct {
	Peer int
	Kind error // ErrPeerLost or ErrProtocol
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d %v: %v", e.Peer, e.Kind, e.Err)
}

// Unwrap gives both the kind and the cause to errors.Is.
func (e *PeerError) Unwrap() []error { return []error{e.Kind, e.Err} }

// MismatchError reports that this rank's descriptor differs from the one a
// peer sent for the same message.
type MismatchError struct {
	Tag    Tag
	Local  Desc
	Peer   int
	Remote Desc
	Rank   int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: rank %d called %v but rank %d called %v at seq %d",
		ErrMismatch, e.Rank, e.Local, e.Peer, e.Remote, e.Tag.Seq)
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// RemoteFailure is how an operation fails on this rank when a peer failed
// it with FailOp (a mismatch it detected, a cancelled context, bad input).
// Peer is the rank that detected the failure (a failure relayed by
// another rank keeps it), Code classifies it and Reason is its text. It
// matches ErrAborted (a peer failed the operation for this rank) and the
// sentinel of its code, so that a mismatch or a deadline another rank
// detected is classified as one on every rank.
type RemoteFailure struct {
	Peer   int
	Code   Code
	Reason string
}

func (e *RemoteFailure) Error() string {
	return fmt.Sprintf("failed by rank %d: %s", e.Peer, e.Reason)
}

// Unwrap gives ErrAborted and the code's sentinel to errors.Is.
func (e *RemoteFailure) Unwrap() []error {
	if s := e.Code.Err(); s != nil && s != ErrAborted {
		return []error{ErrAborted, s}
	}
	return []error{ErrAborted}
}

// Error is the error every collective returns: it carries this rank, the
// peer involved (-1 for none), the operation, its sequence number and step.
type Error struct {
	Rank int
	Peer int
	Op   string
	Seq  uint64
	Step uint32
	Err  error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("sparcml: rank %d: %s seq %d", e.Rank, e.Op, e.Seq)
	if e.Step != 0 {
		s += fmt.Sprintf(" step %d", e.Step)
	}
	if e.Peer >= 0 {
		s += fmt.Sprintf(" (peer %d)", e.Peer)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// RankList names ranks one by one ("rank 3", "rank 1, rank 3", the first
// 16 and a count), so that each reads as a rank in an error and a search
// for "rank 3" finds it.
func RankList(ranks []int) string {
	const show = 16
	parts := make([]string, 0, min(len(ranks), show)+1)
	for i, r := range ranks {
		if i == show {
			parts = append(parts, fmt.Sprintf("... (%d in all)", len(ranks)))
			break
		}
		parts = append(parts, fmt.Sprintf("rank %d", r))
	}
	return strings.Join(parts, ", ")
}

// LostInSetup is err, met while connecting to peer during a transport's
// set-up, as a *PeerError of kind ErrPeerLost when it says the peer's end
// is gone (end of stream, reset, broken pipe, refused): the peer most
// likely died, and Init reports it to the rendezvous store, which names
// the peer if its store connection ended too. Other errors are returned
// as they are.
func LostInSetup(peer int, err error) error {
	for _, gone := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNREFUSED} {
		if errors.Is(err, gone) {
			return &PeerError{Peer: peer, Kind: ErrPeerLost, Err: err}
		}
	}
	return err
}
