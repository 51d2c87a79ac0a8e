package fallback

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// TestWaiterReadsAheadOverTCP: over a real connection, a caller waiting
// for one large receive (so reading speculatively into its buffer) gets
// its message intact when another large message comes first, and that one
// is delivered intact too.
func TestWaiterReadsAheadOverTCP(t *testing.T) {
	j, ctx, c := waiterJob(t, 3)
	for round, sizes := range [][2]int{{64 << 10, 100 << 10}, {100 << 10, 64 << 10}, {64 << 10, 10}, {20 << 10, 20 << 10}} {
		tagA := transport.Tag{Comm: 2, Seq: uint64(2 * round)}
		tagB := transport.Tag{Comm: 2, Seq: uint64(2*round + 1)}
		wantA, wantB := payload(1, 0, tagA, sizes[0]), payload(1, 0, tagB, sizes[1])
		a := j.ts[0].Recv(1, tagA, testDesc, make([]byte, len(wantA)))
		b := j.ts[0].Recv(1, tagB, testDesc, make([]byte, len(wantB)))
		waited := waitReading(ctx, c, a)
		sb := j.ts[1].Send(0, tagB, testDesc, wantB) // B first: the waiter's bet misses
		sa := j.ts[1].Send(0, tagA, testDesc, wantA)
		if err := <-waited; err != nil {
			t.Fatalf("round %d: A: %v", round, err)
		}
		if !bytes.Equal(a.Data(), wantA) {
			t.Fatalf("round %d: A's payload is wrong", round)
		}
		if err := b.Wait(ctx); err != nil || !bytes.Equal(b.Data(), wantB) {
			t.Fatalf("round %d: B: %v (payload right: %v)", round, err, bytes.Equal(b.Data(), wantB))
		}
		if err := waitAll(ctx, []*transport.Request{sa, sb}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailWhileWaiterReadsAhead: an operation failed while its waiter sits
// in a speculative read of its buffer fails once that read gives the
// buffer back, within the waiter's tick, and the connection goes on.
func TestFailWhileWaiterReadsAhead(t *testing.T) {
	j, ctx, c := waiterJob(t, 3)
	tag := transport.Tag{Comm: 3, Seq: 1}
	r := j.ts[0].Recv(1, tag, testDesc, make([]byte, 64<<10))
	waited := waitReading(ctx, c, r)
	time.Sleep(5 * time.Millisecond) // into the read
	cause := errors.New("failed by the test")
	start := time.Now()
	j.ts[0].FailOp(tag.Comm, tag.Seq, cause)
	if err := <-waited; !errors.Is(err, cause) {
		t.Fatalf("wait: %v, want the operation's failure", err)
	}
	// At most one waiterTick; 2 s is generous for a loaded machine and
	// still far below a hang.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the failure took %v to reach the waiter", took)
	}
	next := transport.Tag{Comm: 3, Seq: 2}
	want := payload(1, 0, next, 70<<10)
	r2 := j.ts[0].Recv(1, next, testDesc, make([]byte, len(want)))
	s := j.ts[1].Send(0, next, testDesc, want)
	if err := r2.Wait(ctx); err != nil || !bytes.Equal(r2.Data(), want) {
		t.Fatalf("after the failure: %v", err)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
