package sparcml

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// traced returns fn unchanged unless SPARCML_DEBUG=TRACE covers the coll
// subsystem; then it returns fn wrapped to log one line when the
// operation ends: kind, sequence number, size, algorithm, time and the
// bytes this rank sent for it. Off, it costs one comparison per operation.
func (c *Comm) traced(kind string, fn opFunc) opFunc {
	fn = c.recorded(kind, fn) // the flight recorder (stall.go)
	if !c.log.Enabled(logging.Trace, logging.Coll) {
		return fn
	}
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		counted := &countingTransport{Transport: op.T}
		op.T = counted
		start := time.Now()
		algo, err := fn(op, cc)
		elapsed := time.Since(start).Round(time.Microsecond)
		// The size is the descriptor's count (the buffer nccl-tests
		// sizes too); sparse operations carry none, since their ranks
		// bring different numbers of entries.
		size := ""
		if d := op.Desc; d.Count > 0 {
			dt := collectives.DType(d.DType)
			size = fmt.Sprintf("%d x %v (%d bytes), ", d.Count, dt, d.Count*uint64(dt.Size()))
		}
		outcome := ""
		if err != nil {
			outcome = ", failed: " + err.Error()
		}
		c.log.Tracef(logging.Coll, "%s seq %d: %salgo %v, %v, sent %d bytes%s",
			kind, op.Seq, size, algo, elapsed, counted.sent.Load(), outcome)
		return algo, err
	}
}

// countingTransport counts the payload bytes one operation sends.
type countingTransport struct {
	transport.Transport
	sent atomic.Uint64
}

// Caps announces nothing: the counter wraps the transport for one
// operation and passes on its Send, not its capabilities.
func (t *countingTransport) Caps() transport.Capabilities { return transport.Capabilities{} }

func (t *countingTransport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	for _, b := range bufs {
		t.sent.Add(uint64(len(b)))
	}
	return t.Transport.Send(peer, tag, desc, bufs...)
}
