// Package wire is what the TCP transport (fallback/) and the shared-memory
// transport (internal/shm) share: the frames their ranks exchange (kinds
// and header), the hello that opens every connection, the limits on what
// a peer may make a rank hold, and the sticky error. Each transport moves
// the bytes its own way (a TCP stream, rings in shared memory); what the
// bytes mean is defined once, here.
package wire

import (
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Version is the protocol version every frame and hello carries. A peer
// speaking another version is refused at the hello.
const Version uint8 = 3

// ProtocolError is a malformed frame or hello. It matches
// transport.ErrProtocol with errors.Is; its text leaves the kind out,
// since the transport.PeerError carrying it already says "protocol error".
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return e.msg }

// Is makes errors.Is(err, transport.ErrProtocol) hold.
func (e *ProtocolError) Is(target error) bool { return target == transport.ErrProtocol }

// ProtocolErrorf formats a ProtocolError.
func ProtocolErrorf(format string, args ...any) error {
	return &ProtocolError{msg: fmt.Sprintf(format, args...)}
}
