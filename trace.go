package sparcml

import (
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/flight"
	"github.com/sparcml/sparcml/internal/logging"
)

// traced returns fn wrapped for the flight recorder and, when
// SPARCML_DEBUG=TRACE covers the coll subsystem, to log one line when the
// operation ends (flight.TraceLine). Off, TRACE costs one comparison per
// operation.
func (c *Comm) traced(kind string, fn opFunc) opFunc {
	fn = c.recorded(kind, fn)
	if !c.log.Enabled(logging.Trace, logging.Coll) {
		return fn
	}
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		counted := &flight.CountingTransport{Transport: op.T}
		op.T = counted
		start := time.Now()
		algo, err := fn(op, cc)
		c.log.Tracef(logging.Coll, "%s", flight.TraceLine(kind, op, algo, time.Since(start), counted.Sent(), err))
		return algo, err
	}
}

// recorded wraps fn to record the operation in the flight recorder and,
// when it fails, to name the late ranks (a timeout) and dump.
func (c *Comm) recorded(kind string, fn opFunc) opFunc {
	w := c.diag
	if w == nil {
		return fn
	}
	return func(op *collectives.Op, cc callConfig) (Algo, error) {
		slot := w.Begin(kind, op.Seq)
		algo, err := fn(op, cc)
		return algo, w.End(slot, op, algo, err)
	}
}

// startDiag attaches the flight recorder to c and, for a job with a
// store, starts publishing progress and watching for stalls.
func (c *Comm) startDiag(s *config.Settings, store bootstrap.Store) {
	c.diag = flight.Start(flight.Config{Rank: c.Rank(), Size: c.Size(), FlightOps: s.FlightOps,
		StallWarn: s.StallWarn, DumpDir: s.DumpDir, Store: store, Log: c.log})
}
