package sparcml

import (
	"errors"
	"sync"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// The flight recorder: each communicator made by Init, Local or NewComm
// keeps its last SPARCML_FLIGHT_OPS operations in a ring, so that after a
// timeout or a failure (or on SIGUSR1) every rank can say where it stood
// (flightdump.go writes and reads the dumps, `sparcml trace` merges
// them), as PyTorch's flight recorder does for NCCL.

// FlightState is where an operation stood when the recorder was read.
type FlightState string

// Operation states in the flight recorder.
const (
	FlightStarted FlightState = "started" // in flight
	FlightDone    FlightState = "done"
	FlightFailed  FlightState = "failed"
)

// FlightOp is one operation in a rank's flight recorder.
type FlightOp struct {
	Seq   uint64      `json:"seq"`
	Kind  string      `json:"kind"`
	Count uint64      `json:"count,omitempty"` // elements, when the operation has one count
	DType string      `json:"dtype,omitempty"`
	Algo  string      `json:"algo,omitempty"`
	Peer  int         `json:"peer"` // the peer its error names; -1: none
	State FlightState `json:"state"`
	Start time.Time   `json:"start"`
	End   time.Time   `json:"end,omitzero"` // zero while in flight
	Err   string      `json:"error,omitempty"`
}

// recorder is the ring. One mutex: an operation takes it twice, which
// costs far less than the operation's own synchronisation.
type recorder struct {
	mu      sync.Mutex
	ring    []FlightOp
	next    int    // the slot the next operation takes
	started uint64 // the highest sequence number started
	failed  bool   // some operation failed since the last dump
}

func newRecorder(n int) *recorder {
	return &recorder{ring: make([]FlightOp, 0, max(n, 1))}
}

// begin records an operation's start and returns its slot.
func (r *recorder) begin(kind string, seq uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := FlightOp{Seq: seq, Kind: kind, Peer: -1, State: FlightStarted, Start: time.Now()}
	slot := r.next
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, op)
	} else {
		r.ring[slot] = op
	}
	r.next = (slot + 1) % cap(r.ring)
	r.started = max(r.started, seq)
	return slot
}

// end records an operation's outcome, unless its slot was reused.
func (r *recorder) end(slot int, op *collectives.Op, algo Algo, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &r.ring[slot]
	if rec.Seq != op.Seq || rec.State != FlightStarted {
		return
	}
	rec.End = time.Now()
	if d := op.Desc; d.Count > 0 {
		rec.Count = d.Count
		rec.DType = collectives.DType(d.DType).String()
	}
	if algo != AlgoAuto {
		rec.Algo = algo.String()
	}
	rec.State = FlightDone
	if err != nil {
		rec.State, rec.Err = FlightFailed, err.Error()
		var te *transport.Error
		if errors.As(err, &te) {
			rec.Peer = te.Peer
		}
		r.failed = true
	}
}

// snapshot returns the ring, oldest first, and the highest started seq.
func (r *recorder) snapshot() ([]FlightOp, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := make([]FlightOp, 0, len(r.ring))
	if len(r.ring) == cap(r.ring) {
		ops = append(ops, r.ring[r.next:]...)
		ops = append(ops, r.ring[:r.next]...)
	} else {
		ops = append(ops, r.ring...)
	}
	return ops, r.started
}

// oldestInFlight returns the oldest operation still in flight.
func (r *recorder) oldestInFlight() (FlightOp, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var oldest FlightOp
	found := false
	for _, op := range r.ring {
		if op.State == FlightStarted && (!found || op.Seq < oldest.Seq) {
			oldest, found = op, true
		}
	}
	return oldest, found
}

// progress returns the highest started seq and the oldest in flight (0:
// none), for the progress record.
func (r *recorder) progress() (started, oldest uint64) {
	op, ok := r.oldestInFlight()
	r.mu.Lock()
	started = r.started
	r.mu.Unlock()
	if ok {
		oldest = op.Seq
	}
	return started, oldest
}

// takeFailed reports whether an operation failed since the last call.
func (r *recorder) takeFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failed
	r.failed = false
	return f
}
