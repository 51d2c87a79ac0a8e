// Package flight is the diagnostics of a communicator: the flight
// recorder (each communicator made by Init, Local or NewComm keeps its last
// SPARCML_FLIGHT_OPS operations in a ring, so that after a timeout or a
// failure, or on SIGUSR1, every rank can say where it stood, as PyTorch's
// flight recorder does for NCCL), its dump files and their merged view
// (what `sparcml trace` prints), the progress records and stall reports
// that name late ranks, and the per-operation TRACE lines.
package flight

import (
	"errors"
	"sync"
	"time"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/transport"
)

// State is where an operation stood when the recorder was read.
type State string

// Operation states in the flight recorder.
const (
	Started State = "started" // in flight
	Done    State = "done"
	Failed  State = "failed"
)

// Op is one operation in a rank's flight recorder.
type Op struct {
	Seq   uint64    `json:"seq"`
	Kind  string    `json:"kind"`
	Count uint64    `json:"count,omitempty"` // elements, when the operation has one count
	DType string    `json:"dtype,omitempty"`
	Algo  string    `json:"algo,omitempty"`
	Peer  int       `json:"peer"` // the peer its error names; -1: none
	State State     `json:"state"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"` // zero while in flight
	Err   string    `json:"error,omitempty"`
}

// Recorder is the ring. One mutex: an operation takes it twice, which
// costs far less than the operation's own synchronisation.
type Recorder struct {
	mu      sync.Mutex
	ring    []Op
	next    int    // the slot the next operation takes
	started uint64 // the highest sequence number started
	failed  bool   // some operation failed since the last dump
}

// NewRecorder keeps the last n operations (at least one).
func NewRecorder(n int) *Recorder {
	return &Recorder{ring: make([]Op, 0, max(n, 1))}
}

// Begin records an operation's start and returns its slot.
func (r *Recorder) Begin(kind string, seq uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := Op{Seq: seq, Kind: kind, Peer: -1, State: Started, Start: time.Now()}
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

// End records an operation's outcome, unless its slot was reused.
func (r *Recorder) End(slot int, op *collectives.Op, algo collectives.Algo, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &r.ring[slot]
	if rec.Seq != op.Seq || rec.State != Started {
		return
	}
	rec.End = time.Now()
	if d := op.Desc; d.Count > 0 {
		rec.Count = d.Count
		rec.DType = collectives.DType(d.DType).String()
	}
	if algo != collectives.AlgoAuto {
		rec.Algo = algo.String()
	}
	rec.State = Done
	if err != nil {
		rec.State, rec.Err = Failed, err.Error()
		var te *transport.Error
		if errors.As(err, &te) {
			rec.Peer = te.Peer
		}
		r.failed = true
	}
}

// Snapshot returns the ring, oldest first, and the highest started seq.
func (r *Recorder) Snapshot() ([]Op, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := make([]Op, 0, len(r.ring))
	if len(r.ring) == cap(r.ring) {
		ops = append(ops, r.ring[r.next:]...)
		ops = append(ops, r.ring[:r.next]...)
	} else {
		ops = append(ops, r.ring...)
	}
	return ops, r.started
}

// OldestInFlight returns the oldest operation still in flight.
func (r *Recorder) OldestInFlight() (Op, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var oldest Op
	found := false
	for _, op := range r.ring {
		if op.State == Started && (!found || op.Seq < oldest.Seq) {
			oldest, found = op, true
		}
	}
	return oldest, found
}

// Progress returns the highest started seq and the oldest in flight (0:
// none), for the progress record.
func (r *Recorder) Progress() (started, oldest uint64) {
	op, ok := r.OldestInFlight()
	r.mu.Lock()
	started = r.started
	r.mu.Unlock()
	if ok {
		oldest = op.Seq
	}
	return started, oldest
}

// TakeFailed reports whether an operation failed since the last call.
func (r *Recorder) TakeFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failed
	r.failed = false
	return f
}
