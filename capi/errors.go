package main

// #include "capi.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"unsafe"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/transport"
)

// Status codes of include/sparcml.h.
const (
	statusOK       = C.SPARCML_OK
	statusInvalid  = C.SPARCML_ERR_INVALID
	statusMismatch = C.SPARCML_ERR_MISMATCH
	statusPeerLost = C.SPARCML_ERR_PEER_LOST
	statusTimeout  = C.SPARCML_ERR_TIMEOUT
	statusAborted  = C.SPARCML_ERR_ABORTED
	statusClosed   = C.SPARCML_ERR_CLOSED
	statusInit     = C.SPARCML_ERR_INIT
	statusNotDone  = C.SPARCML_ERR_NOT_DONE
	statusNoMem    = C.SPARCML_ERR_NOMEM
	statusInternal = C.SPARCML_ERR_INTERNAL
)

// Errors of the binding itself, classified like the library's.
var (
	errInit     = errors.New("init failed")
	errNotDone  = errors.New("not complete")
	errNoMem    = errors.New("out of memory")
	errInternal = errors.New("internal error")
)

// statusOfCode is the status of a failure of each code on the rank that
// detected it: every transport.Code this build knows has one.
var statusOfCode = map[transport.Code]C.int{
	transport.CodeUnknown:  statusInternal,
	transport.CodeInvalid:  statusInvalid,
	transport.CodeMismatch: statusMismatch,
	transport.CodePeerLost: statusPeerLost,
	transport.CodeProtocol: statusPeerLost,
	transport.CodeTimeout:  statusTimeout,
	transport.CodeAborted:  statusAborted,
	transport.CodeCanceled: statusAborted,
	transport.CodeClosed:   statusClosed,
	transport.CodeRevoked:  statusAborted,
}

// remoteStatus is the status of a failure another rank detected and told
// this one of (transport.RemoteFailure), by its code: what holds for
// every rank alike, a mismatch or a deadline, has its own status; for the
// rest (bad arguments there, a communicator closed there, a code from a
// newer build) this rank's operation was aborted, as include/sparcml.h
// says.
func remoteStatus(code transport.Code) C.int {
	switch code {
	case transport.CodeMismatch, transport.CodeTimeout:
		return statusOfCode[code]
	}
	return statusAborted
}

// statusOf classifies err by its code (transport.CodeOf), never its text:
// the binding's own errors first, then a failure another rank reported,
// then this rank's own.
func statusOf(err error) C.int {
	var remote *transport.RemoteFailure
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, errNotDone):
		return statusNotDone
	case errors.Is(err, errNoMem):
		return statusNoMem
	case errors.Is(err, errInit):
		return statusInit
	case errors.As(err, &remote):
		return remoteStatus(remote.Code)
	}
	if s, ok := statusOfCode[transport.CodeOf(err)]; ok {
		return s
	}
	return statusInternal
}

// where names the rank, peer, operation and sequence number of err, as
// far as it says (-1 and "" where it does not).
func where(err error) (rank, peer int, op string, seq uint64) {
	rank, peer = -1, -1
	var te *sparcml.Error
	if errors.As(err, &te) {
		rank, peer, op, seq = te.Rank, te.Peer, te.Op, te.Seq
	}
	if peer >= 0 {
		return rank, peer, op, seq
	}
	var pe *transport.PeerError
	var me *transport.MismatchError
	var rf *transport.RemoteFailure
	switch {
	case errors.As(err, &me):
		peer = me.Peer
	case errors.As(err, &rf):
		peer = rf.Peer
	case errors.As(err, &pe):
		peer = pe.Peer
	}
	return rank, peer, op, seq
}

// record stores err as this thread's last error and returns its status.
// rank and op fill in what err does not say.
func record(err error, rank int, op string) C.int {
	status := statusOf(err)
	r, peer, o, seq := where(err)
	if r < 0 {
		r = rank
	}
	if o == "" {
		o = op
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "sparcml") {
		msg = fmt.Sprintf("sparcml: rank %d: %s: %s", r, o, msg)
	}
	C.sparcml_capi_set_error(status, C.int(r), C.int(peer), C.uint64_t(seq),
		cstr(o), C.size_t(len(o)), cstr(msg), C.size_t(len(msg)))
	return status
}

// cstr passes s's bytes to C for the duration of a call (C copies them).
func cstr(s string) *C.char {
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// guard turns a panic in an export into an internal error instead of
// killing the host process: deferred by every export with its status.
func guard(status *C.int, op string) {
	if p := recover(); p != nil {
		fmt.Fprintf(os.Stderr, "sparcml: panic in %s: %v\n%s", op, p, debug.Stack())
		*status = record(fmt.Errorf("%w: panic in %s: %v (stack on stderr)", errInternal, op, p), -1, op)
	}
}

// invalidf is an ErrInvalid error.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sparcml.ErrInvalid, fmt.Sprintf(format, args...))
}
