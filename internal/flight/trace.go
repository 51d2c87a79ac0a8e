package flight

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// TraceLine is the line SPARCML_DEBUG=TRACE logs when an operation ends:
// kind, sequence number, size, algorithm, time and the bytes this rank
// sent for it. The size is the descriptor's count (the buffer nccl-tests
// sizes too); sparse operations carry none, since their ranks bring
// different numbers of entries.
func TraceLine(kind string, op *collectives.Op, algo collectives.Algo, elapsed time.Duration, sent uint64, err error) string {
	size := ""
	if d := op.Desc; d.Count > 0 {
		dt := collectives.DType(d.DType)
		size = fmt.Sprintf("%d x %v (%d bytes), ", d.Count, dt, d.Count*uint64(dt.Size()))
	}
	outcome := ""
	if err != nil {
		outcome = ", failed: " + err.Error()
	}
	return fmt.Sprintf("%s seq %d: %salgo %v, %v, sent %d bytes%s",
		kind, op.Seq, size, algo, elapsed.Round(time.Microsecond), sent, outcome)
}

// CountingTransport counts the payload bytes one operation sends.
type CountingTransport struct {
	transport.Transport
	sent atomic.Uint64
}

// Caps is the wrapped transport's scheduling only (transport.ViewCaps):
// the counter wraps the transport for one operation and passes on its
// Send, not its failure capabilities.
func (t *CountingTransport) Caps() transport.Capabilities { return transport.ViewCaps(t.Transport) }

// Sent is the payload bytes sent so far.
func (t *CountingTransport) Sent() uint64 { return t.sent.Load() }

// Send counts bufs and sends them.
func (t *CountingTransport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	for _, b := range bufs {
		t.sent.Add(uint64(len(b)))
	}
	return t.Transport.Send(peer, tag, desc, bufs...)
}
