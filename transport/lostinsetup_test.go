package transport

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
)

// A set-up error that says the peer's end is gone becomes the peer's
// loss, naming it; others (authentication, a timeout) stay as they are.
func TestLostInSetup(t *testing.T) {
	for _, gone := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNREFUSED} {
		err := LostInSetup(5, fmt.Errorf("reading hello: %w", gone))
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Peer != 5 || !errors.Is(err, ErrPeerLost) || !errors.Is(err, gone) {
			t.Errorf("LostInSetup(%v) = %v, want rank 5 lost", gone, err)
		}
	}
	for _, other := range []error{errors.New("auth: wrong token"), syscall.ETIMEDOUT} {
		if err := LostInSetup(5, other); err != other {
			t.Errorf("LostInSetup(%v) = %v, want it unchanged", other, err)
		}
	}
}
