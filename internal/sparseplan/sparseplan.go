// Package sparseplan is a communicator's record of the decisions of its
// sparse allreduces, for reuse.
//
// A sparse allreduce under AlgoAuto or WithBalancedRanges exchanges every
// rank's entry count and index samples before it moves any data, and
// decides from them its algorithm, index wire and ranges: ceil(log2 P)
// message rounds and the model's choice, on every call. A training loop
// calls it with the same tensor every step, whose counts change little:
// for calls that name their tensor (WithTensor) a communicator keeps each
// decision (collectives.SparsePlan) and reuses it for the calls of the
// same tensor, dimension, value type and options that follow, exchanging
// again every SPARCML_SPARSE_AGREE_EVERY calls (or WithTensor's own
// interval, which is part of the key), as Horovod's response
// cache spares the repeated negotiation of a named tensor. Untagged calls
// exchange every time: the call alone cannot tell two tensors of one
// shape apart, and a plan made at 1% density runs a call at 10% as it
// would at 1%, at a cost docs/ALGORITHMS-sparse.md ("Counts exchange")
// measures.
//
// Every rank must make the same decisions, so whether a call exchanges or
// reuses is settled when it starts, in start order, from the calls started
// before it alone: a call of the key's every-th turn exchanges and leaves
// its plan for the next ones; the others take the plan of the last one
// that exchanged, waiting for it if that call is still in flight. A call
// whose exchange failed left no plan (its exchange fails on every rank
// alike), and the calls that would have reused it exchange themselves.
// Benchmark: sparcml bench --op sparse-allreduce --density 0.001 --algo
// ssar-split,auto,auto-tensor on the emulated cluster (docs/PERFORMANCE.md,
// "Auto against the best forced algorithm").
package sparseplan

import (
	"context"
	"sync"

	"github.com/sparcml/sparcml/collectives"
	"github.com/sparcml/sparcml/quant"
)

// Plans is a communicator's record of the plans of its sparse
// allreduces, by call key.
type Plans struct {
	Every int // calls per counts exchange (SPARCML_SPARSE_AGREE_EVERY); 0 or 1: every call

	mu    sync.Mutex
	slots map[Key]*planSlot
}

// Key is what a plan is made for: collectives.SparsePlan checks the
// same.
type Key struct {
	Tensor   uint64 // WithTensor's id
	Dim      int
	Block    int // values per index: a block vector's row width, 1 for elements
	DType    collectives.DType
	Red      collectives.ReduceOp
	Algo     collectives.Algo
	Balanced bool
	Quant    quant.Kind
	Indices  collectives.IndexWire
	Every    int // WithTensor's interval; 0: the communicator's (Plans.Every)
}

type planSlot struct {
	calls int          // calls started with the key
	last  *planPromise // of the last call that exchanged
}

// planPromise is the plan a call in flight will leave: done closes when
// the call has made it or failed to.
type planPromise struct {
	once sync.Once
	done chan struct{}
	plan *collectives.SparsePlan
}

// maxPlanKeys bounds the keys a communicator remembers; past it the
// record starts afresh, which every rank does at the same call.
const maxPlanKeys = 256

// Ticket is a call's part: reuse the plan of wait, or (wait nil) make
// one and leave it in make.
type Ticket struct {
	wait *planPromise
	make *planPromise
}

// Ticket takes a call's turn for key. Untagged calls and calls that
// exchange no counts (a forced algorithm with equal ranges) need none.
func (s *Plans) Ticket(key Key, tagged bool) Ticket {
	if !tagged || (key.Algo != collectives.AlgoAuto && !key.Balanced) {
		return Ticket{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil || len(s.slots) >= maxPlanKeys {
		s.slots = map[Key]*planSlot{}
	}
	slot := s.slots[key]
	if slot == nil {
		slot = &planSlot{}
		s.slots[key] = slot
	}
	defer func() { slot.calls++ }()
	every := s.Every
	if key.Every > 0 {
		every = key.Every
	}
	if every > 1 && slot.calls%every != 0 && slot.last != nil {
		return Ticket{wait: slot.last}
	}
	slot.last = &planPromise{done: make(chan struct{})}
	return Ticket{make: slot.last}
}

// Plan is the plan a call passes to the collective: the promised one once
// made, nil (exchange) when it failed or when this call makes one.
func (t Ticket) Plan(ctx context.Context) (*collectives.SparsePlan, error) {
	if t.wait == nil {
		return nil, nil
	}
	select {
	case <-t.wait.done:
		return t.wait.plan, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Keep records the plan a call made (nil if it made none) for the calls
// waiting on it. Only its first call counts, so a call can keep its plan
// as soon as it has one and keep nil on every way out.
func (t Ticket) Keep(p *collectives.SparsePlan) {
	if t.make != nil {
		t.make.once.Do(func() {
			t.make.plan = p
			close(t.make.done)
		})
	}
}
