package sparseplan

import (
	"context"
	"testing"
	"time"

	"github.com/sparcml/sparcml/collectives"
)

// With Every = 3, a key's calls 0, 3, 6 exchange and the calls between
// reuse the plan of the last one that did; a failed exchange (Keep(nil))
// leaves no plan; untagged calls and forced algorithms with equal ranges
// take no turn.
func TestTicketSchedule(t *testing.T) {
	s := &Plans{Every: 3}
	key := Key{Tensor: 7, Dim: 100, Algo: collectives.AlgoAuto}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a wrong wait fails, not hangs
	defer cancel()
	var calls []Ticket
	for i := range 7 {
		tk := s.Ticket(key, true)
		if makes := tk.wait == nil; makes != (i%3 == 0) {
			t.Fatalf("call %d: makes a plan %v", i, makes)
		}
		calls = append(calls, tk)
	}
	want := &collectives.SparsePlan{}
	calls[0].Keep(want)
	calls[0].Keep(nil) // only the first Keep counts
	for _, i := range []int{1, 2} {
		if got, err := calls[i].Plan(ctx); err != nil || got != want {
			t.Fatalf("call %d got %v, %v, want call 0's plan", i, got, err)
		}
	}
	s2 := &Plans{Every: 3}
	a := s2.Ticket(key, true)
	b := s2.Ticket(key, true)
	a.Keep(want)
	if got, err := b.Plan(ctx); err != nil || got != want {
		t.Fatalf("the reusing call got %v, %v", got, err)
	}
	if p, _ := a.Plan(ctx); p != nil {
		t.Fatal("the call that exchanges was handed a plan")
	}
	if tk := s.Ticket(key, false); tk.wait != nil || tk.make != nil {
		t.Fatal("an untagged call took a turn")
	}
	forced := key
	forced.Algo = collectives.AlgoDSAR
	if tk := s.Ticket(forced, true); tk.wait != nil || tk.make != nil {
		t.Fatal("a forced algorithm with equal ranges took a turn")
	}
	// A call reusing a failed exchange gets no plan and exchanges itself.
	s3 := &Plans{Every: 3}
	failed, after := s3.Ticket(key, true), s3.Ticket(key, true)
	failed.Keep(nil)
	if got, err := after.Plan(ctx); err != nil || got != nil {
		t.Fatalf("after a failed exchange: %v, %v", got, err)
	}
}

// A key's own interval (WithTensor(id, n)) replaces Plans.Every for that
// key alone, and keys that differ only in it keep separate schedules.
func TestTicketKeyInterval(t *testing.T) {
	s := &Plans{Every: 16}
	own := Key{Tensor: 7, Dim: 100, Algo: collectives.AlgoAuto, Every: 2}
	shared := own
	shared.Every = 0
	for i := range 6 {
		if makes := s.Ticket(own, true).wait == nil; makes != (i%2 == 0) {
			t.Fatalf("Every 2, call %d: makes a plan %v", i, makes)
		}
		if makes := s.Ticket(shared, true).wait == nil; makes != (i == 0) {
			t.Fatalf("Plans.Every 16, call %d: makes a plan %v", i, makes)
		}
	}
	always := own
	always.Every = 1
	for i := range 3 {
		if s.Ticket(always, true).wait != nil {
			t.Fatalf("Every 1, call %d reused a plan", i)
		}
	}
}
