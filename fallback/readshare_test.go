package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// quietWatchdog keeps the idle-connection watchdog from handing
// connections to their background reader during the test (set it before
// starting the transports).
func quietWatchdog(t *testing.T) {
	saved := idleCheck
	idleCheck = time.Hour
	t.Cleanup(func() { idleCheck = saved })
}

// awaitReadShare polls c's read-side state until cond holds or ctx ends
// (the test then fails on its own deadline).
func awaitReadShare(ctx context.Context, c *conn, cond func(rs *readShare) bool) {
	for ctx.Err() == nil {
		c.rs.mu.Lock()
		ok := cond(&c.rs)
		c.rs.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waiterJob starts two ranks, checked for leaks, without the idle
// watchdog, after msgs messages of pingPong: rank 0's waiters read its
// connection from rank 1 themselves. It returns the job, the test's
// context and that connection.
func waiterJob(t *testing.T, msgs int) (*job, context.Context, *conn) {
	t.Helper()
	checkNoLeaks(t)
	quietWatchdog(t)
	j := startJob(t, 2, nil)
	pingPong(t, j, 1, msgs)
	return j, waitCtx(t), j.ts[0].peers[1][0]
}

// waitReading waits for r in a goroutine and returns once that waiter
// reads c itself; the channel gets what Wait returned.
func waitReading(ctx context.Context, c *conn, r *transport.Request) <-chan error {
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(ctx) }()
	awaitReadShare(ctx, c, func(rs *readShare) bool { return rs.owner == ownerWaiter })
	return waited
}

// pingPong makes rank 0 receive msgs messages from rank 1 with Wait, each
// posted before it is sent, so that afterwards rank 0's waiters read
// their connection themselves and nobody reads it in between (the state
// the tests here start from).
func pingPong(t *testing.T, j *job, comm uint32, msgs int) {
	t.Helper()
	ctx := waitCtx(t)
	c := j.ts[0].peers[1][0]
	// A new connection is read in the background first: let that turn
	// begin, or it would come after the waiters.
	awaitReadShare(ctx, c, func(rs *readShare) bool { return !rs.bgWanted })
	for i := range msgs {
		tag := transport.Tag{Comm: comm, Seq: uint64(i)}
		want := payload(1, 0, tag, 1000+i)
		r := j.ts[0].Recv(1, tag, testDesc, make([]byte, len(want)))
		waited := make(chan error, 1)
		go func() { waited <- r.Wait(ctx) }()
		// Send only once the waiter waits: reading, or blocked behind
		// the background reader (which then hands over).
		awaitReadShare(ctx, c, func(rs *readShare) bool { return rs.owner == ownerWaiter || rs.blocked > 0 })
		s := j.ts[1].Send(0, tag, testDesc, want)
		if err := <-waited; err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(r.Data(), want) {
			t.Fatalf("message %d: wrong payload", i)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.rs.mu.Lock()
	owner := c.rs.owner
	c.rs.mu.Unlock()
	if owner != ownerNone {
		t.Fatalf("after %d waits the read side is owned by %d, want nobody", msgs, owner)
	}
}

// A receive that nobody waits on, only watches through Done, completes
// even when the connection's waiters have left it unread.
func TestWatchedReceiveProgresses(t *testing.T) {
	j, ctx, _ := waiterJob(t, 5)
	tag := transport.Tag{Comm: 2, Seq: 1}
	want := payload(1, 0, tag, 300<<10)
	r := j.ts[0].Recv(1, tag, testDesc, make([]byte, len(want)))
	done := r.Done()
	time.Sleep(10 * time.Millisecond) // the send comes later
	s := j.ts[1].Send(0, tag, testDesc, want)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a receive watched through Done never completed")
	}
	if err := r.Err(); err != nil || !bytes.Equal(r.Data(), want) {
		t.Fatalf("watched receive: %v, payload equal %v", err, bytes.Equal(r.Data(), want))
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose context ends in the middle of a frame (of its header, of
// its payload) leaves it half read; the next waiter, or the background
// reader for a receive watched through Done, resumes it where it stopped
// and the payload arrives whole.
func TestWaiterTimeoutsResume(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) {
			checkNoLeaks(t)
			quietWatchdog(t)
			tr, fake := withFakePeer(t, nil)
			ctx := waitCtx(t)
			// One message waited for first: from then on waiters read.
			warm := transport.Tag{Comm: 7, Seq: 0}
			w := tr.Recv(1, warm, testDesc, make([]byte, 10))
			if _, err := fake.Write(frameBytes(wire.Header{Kind: wire.Data, Tag: warm, Desc: testDesc}, payload(1, 0, warm, 10))); err != nil {
				t.Fatal(err)
			}
			if err := w.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			other := transport.Tag{Comm: 7, Seq: 1}
			mine := transport.Tag{Comm: 7, Seq: 2}
			// An unexpected message first, then ours, the stream cut
			// inside the first header, inside both payloads and between.
			first, want := payload(1, 0, other, 3000), payload(1, 0, mine, 600<<10)
			stream := append(frameBytes(wire.Header{Kind: wire.Data, Tag: other, Desc: testDesc}, first),
				frameBytes(wire.Header{Kind: wire.Data, Tag: mine, Desc: testDesc}, want)...)
			cuts := []int{20, 1000, wire.HeaderSize + len(first), wire.HeaderSize + len(first) + 30, len(stream) - 300<<10, len(stream)}
			r := tr.Recv(1, mine, testDesc, make([]byte, len(want)))
			pos := 0
			for i, cut := range cuts {
				if _, err := fake.Write(stream[pos:cut]); err != nil {
					t.Fatal(err)
				}
				pos = cut
				if cut == len(stream) {
					break
				}
				if watch && i == 2 {
					_ = r.Done() // from here on the background reader serves it
				}
				short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
				err := r.Wait(short)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("wait after %d of %d bytes: %v, want DeadlineExceeded", cut, len(stream), err)
				}
			}
			if err := r.Wait(ctx); err != nil || !bytes.Equal(r.Data(), want) {
				t.Fatalf("receive: %v, payload equal %v", err, bytes.Equal(r.Data(), want))
			}
			u := tr.Recv(1, other, testDesc, make([]byte, len(first)))
			if err := u.Wait(ctx); err != nil || !bytes.Equal(u.Data(), first) {
				t.Fatalf("unexpected message: %v", err)
			}
		})
	}
}

// A waiter that owns the read side returns when its context ends, soon
// after, and a later wait gets the message.
func TestWaiterContextEnds(t *testing.T) {
	j, ctx, _ := waiterJob(t, 3)
	tag := transport.Tag{Comm: 4, Seq: 1}
	r := j.ts[0].Recv(1, tag, testDesc, make([]byte, 8))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := r.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing sent: %v, want DeadlineExceeded", err)
	}
	// The deadline is looked at every waiterTick; 2 s is a generous
	// bound for a loaded machine and still far below a hang.
	if late := time.Since(start) - 50*time.Millisecond; late > 2*time.Second {
		t.Fatalf("wait returned %v after its deadline", late)
	}
	s := j.ts[1].Send(0, tag, testDesc, payload(1, 0, tag, 8))
	if err := r.Wait(ctx); err != nil || !bytes.Equal(r.Data(), payload(1, 0, tag, 8)) {
		t.Fatalf("second wait: %v", err)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two ranks that first send each other more than the sockets hold, wait
// for their sends, and only then post their receives: somebody must read
// while they wait, or both would wait for ever.
func TestCrossedSendsWhileIdle(t *testing.T) {
	checkNoLeaks(t)
	quietWatchdog(t)
	const msgs, size = 8, 2 << 20
	j := startJob(t, 2, func(c *Config) { c.SocketBuffer = 64 << 10 })
	pingPong(t, j, 1, 3)
	ctx := waitCtx(t)
	tagOf := func(i int) transport.Tag { return transport.Tag{Comm: 5, Seq: uint64(i)} }
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := 1 - r
			var sends []*transport.Request
			for i := range msgs {
				sends = append(sends, j.ts[r].Send(peer, tagOf(i), testDesc, payload(r, peer, tagOf(i), size)))
			}
			if errs[r] = waitAll(ctx, sends); errs[r] != nil {
				return
			}
			for i := range msgs {
				rr := j.ts[r].Recv(peer, tagOf(i), testDesc, make([]byte, size))
				if errs[r] = rr.Wait(ctx); errs[r] != nil {
					return
				}
				if !bytes.Equal(rr.Data(), payload(peer, r, tagOf(i), size)) {
					errs[r] = errors.New("wrong payload")
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A peer that dies while nobody reads its connection is noticed anyway
// (the watchdog hands idle connections to their background reader), and
// a receive pending from another, live peer fails naming the dead one.
func TestIdlePeerLossNoticed(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 3, nil)
	ctx := waitCtx(t)
	for _, peer := range []int{1, 2} { // both of rank 0's connections go idle
		tag := transport.Tag{Comm: 6, Seq: uint64(peer)}
		s := j.ts[peer].Send(0, tag, testDesc, payload(peer, 0, tag, 100))
		if err := j.ts[0].Recv(peer, tag, testDesc, make([]byte, 100)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pending := j.ts[0].Recv(1, transport.Tag{Comm: 6, Seq: 9}, testDesc, make([]byte, 8))
	j.ts[2].Abort(errors.New("test kills rank 2"))
	bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := pending.Wait(bounded)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("pending receive from rank 1 after rank 2 died: %v, want ErrPeerLost naming rank 2", err)
	}
}

// Closing a transport while a caller is reading its connection for a
// receive ends that read: the receive fails with ErrClosed, Close returns
// and no goroutine is left.
func TestCloseWhileWaiterReads(t *testing.T) {
	j, ctx, c := waiterJob(t, 3)
	r := j.ts[0].Recv(1, transport.Tag{Comm: 8, Seq: 1}, testDesc, make([]byte, 8))
	waited := waitReading(ctx, c, r)
	closed := make(chan struct{})
	go func() { j.ts[0].Close(); close(closed) }()
	select {
	case err := <-waited:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("receive pending at Close: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("a receive being read by its waiter never ended at Close")
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close never returned")
	}
}
