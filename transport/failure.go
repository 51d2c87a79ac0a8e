package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The failure a transport sends with FailOp is the same in every
// transport's frames:
//
//	offset size field
//	     0    1 code (Code)
//	     1    4 origin: the rank that detected the failure, little-endian
//	     5    n reason text, up to MaxFailureLen in all
//
// The origin travels so that a rank relaying a peer's failure (its
// operation failed with it, so it fails the operation for the others)
// names the rank that detected it, and each error names it once.
const (
	failureHeaderLen = 5
	// MaxFailureLen bounds an encoded failure: a transport's frame
	// carrying one needs no more room.
	MaxFailureLen = 1024
	// MaxReasonLen bounds the reason text of a failure on the wire.
	MaxReasonLen = MaxFailureLen - failureHeaderLen
)

// FailureOf is what FailOp on rank tells the peers of err: its code, the
// rank that detected it (rank, or the origin of a failure err relays) and
// its text. The text of an *Error leaves out its rank, operation and
// sequence number, which each peer's own error says.
func FailureOf(rank int, err error) *RemoteFailure {
	if err == nil {
		err = ErrAborted
	}
	var relayed *RemoteFailure
	if errors.As(err, &relayed) {
		return relayed
	}
	code := CodeOf(err)
	if te, ok := err.(*Error); ok {
		err = te.Err
	}
	return &RemoteFailure{Peer: rank, Code: code, Reason: err.Error()}
}

// AppendFailure appends the encoding of f to b, its reason cut to
// MaxReasonLen bytes.
func AppendFailure(b []byte, f *RemoteFailure) []byte {
	reason := f.Reason
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	b = append(b, byte(f.Code))
	b = binary.LittleEndian.AppendUint32(b, uint32(f.Peer))
	return append(b, reason...)
}

// DecodeFailure parses an encoded failure from a job of size ranks. A
// code this build does not know is kept (the failure then matches
// ErrAborted only); a short or oversized encoding, or an origin outside
// the job, is an ErrProtocol error.
func DecodeFailure(b []byte, size int) (*RemoteFailure, error) {
	if len(b) < failureHeaderLen || len(b) > MaxFailureLen {
		return nil, malformedf("a failure of %d bytes, want %d to %d", len(b), failureHeaderLen, MaxFailureLen)
	}
	origin := binary.LittleEndian.Uint32(b[1:])
	if int64(origin) >= int64(size) {
		return nil, malformedf("a failure detected by rank %d of a job of %d", origin, size)
	}
	return &RemoteFailure{Peer: int(origin), Code: Code(b[0]), Reason: string(b[failureHeaderLen:])}, nil
}

// malformed is a failure that does not decode. It matches ErrProtocol;
// its text leaves the kind to the PeerError that carries it.
type malformed struct{ msg string }

func (e *malformed) Error() string        { return e.msg }
func (e *malformed) Is(target error) bool { return target == ErrProtocol }

func malformedf(format string, args ...any) error {
	return &malformed{msg: fmt.Sprintf(format, args...)}
}
