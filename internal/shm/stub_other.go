//go:build !linux

package shm

import (
	"context"
	"runtime"

	"github.com/sparcml/sparcml/transport"
)

// Transport is the shared-memory transport; on this system New always
// fails with ErrUnavailable.
type Transport struct{}

// New fails with ErrUnavailable on this system (after checking cfg).
func New(ctx context.Context, cfg Config) (*Transport, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrUnavailable
}

// The methods implement transport.Transport;
// on this system no Transport is ever connected, and every request fails
// with ErrUnavailable.

// Name implements transport.Transport.
func (t *Transport) Name() string { return "shm" }

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return 0 }

// Size implements transport.Transport.
func (t *Transport) Size() int { return 1 }

// Send implements transport.Transport.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	return transport.Failed(peer, tag, true, ErrUnavailable)
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	return transport.Failed(peer, tag, false, ErrUnavailable)
}

// FailOp implements transport.Transport.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {}

// Abort implements transport.Transport.
func (t *Transport) Abort(err error) {}

// Err implements transport.Transport.
func (t *Transport) Err() error { return ErrUnavailable }

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats { return transport.Stats{} }

// Close implements transport.Transport.
func (t *Transport) Close() error { return nil }

// Caps implements transport.Transport.
func (t *Transport) Caps() transport.Capabilities {
	return transport.Capabilities{Failed: closedChan, FailLocal: t.FailLocal}
}

// FailLocal (transport.Capabilities.FailLocal) does nothing.
func (t *Transport) FailLocal(err error) {}

// Failed is closed: no Transport is ever connected.
func (t *Transport) Failed() <-chan struct{} { return closedChan }

func onlineCPUs() int { return runtime.NumCPU() }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

var _ transport.Transport = (*Transport)(nil)
