package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// exchangeAllPairs has every rank send one message of a random size
// (0..4 MiB) to every other rank for each of steps, and checks every
// payload byte for byte. Receives of even steps are posted before anything
// is sent (zero-copy path), those of odd steps only once the message has
// arrived unexpectedly.
func exchangeAllPairs(t *testing.T, j *job, seq uint64, steps int) {
	t.Helper()
	ctx := waitCtx(t)
	size := len(j.ts)
	rng := rand.New(rand.NewPCG(seq, uint64(size)))
	sizes := make(map[[3]int]int) // (src, dst, step) -> bytes
	for src := range size {
		for dst := range size {
			for step := range steps {
				n := rng.IntN(4<<20+1) >> rng.IntN(16)
				if rng.IntN(10) == 0 {
					n = 0
				}
				sizes[[3]int{src, dst, step}] = n
			}
		}
	}
	tag := func(step int) transport.Tag { return transport.Tag{Comm: 7, Seq: seq, Step: uint32(step)} }

	errs := make([]error, size)
	var posted, wg sync.WaitGroup
	posted.Add(size)
	for r, tr := range j.ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				type pending struct {
					req  *transport.Request
					want []byte
					buf  []byte
				}
				var recvs []pending
				post := func(step int) {
					for src := range size {
						if src == r {
							continue
						}
						want := payload(src, r, tag(step), sizes[[3]int{src, r, step}])
						buf := make([]byte, len(want)+spareCapacity(r, step))
						recvs = append(recvs, pending{tr.Recv(src, tag(step), testDesc, buf), want, buf})
					}
				}
				for step := 0; step < steps; step += 2 {
					post(step)
				}
				posted.Done()
				posted.Wait()
				var sends []*transport.Request
				for step := range steps {
					for dst := range size {
						if dst != r {
							p := payload(r, dst, tag(step), sizes[[3]int{r, dst, step}])
							// Split the payload to exercise gathering writes.
							h := len(p) / 3
							sends = append(sends, tr.Send(dst, tag(step), testDesc, p[:h], p[h:]))
						}
					}
				}
				// Odd steps: wait until those messages sit unexpected.
				wantUnexpected := (steps / 2) * (size - 1)
				for {
					_, unexpected := tr.m.Pending()
					if unexpected == wantUnexpected {
						break
					}
					if ctx.Err() != nil {
						return fmt.Errorf("waiting for %d unexpected messages: have %d", wantUnexpected, unexpected)
					}
					time.Sleep(time.Millisecond)
				}
				for step := 1; step < steps; step += 2 {
					post(step)
				}
				for _, p := range recvs {
					if err := p.req.Wait(ctx); err != nil {
						return fmt.Errorf("%v: %w", p.req, err)
					}
					got := p.req.Data()
					if !bytes.Equal(got, p.want) {
						return fmt.Errorf("%v: payload of %d bytes differs from the %d bytes sent", p.req, len(got), len(p.want))
					}
					if len(got) > 0 && &got[0] != &p.buf[0] {
						return fmt.Errorf("%v: payload not delivered into the posted buffer", p.req)
					}
				}
				return waitAll(ctx, sends)
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	var sent, recvd uint64
	for _, tr := range j.ts {
		st := tr.Stats()
		sent += st.BytesSent
		recvd += st.BytesRecv
	}
	if sent != recvd {
		t.Errorf("stats: %d bytes sent in total but %d received", sent, recvd)
	}
}

// spareCapacity gives receive buffers a little spare capacity for some messages, so
// both exact-size and larger buffers are used.
func spareCapacity(rank, step int) int { return (rank + step) % 2 * 17 }

func TestAllPairs(t *testing.T) {
	for size := 2; size <= 5; size++ {
		t.Run(fmt.Sprintf("P=%d", size), func(t *testing.T) {
			checkNoLeaks(t)
			j := startJob(t, size, nil)
			exchangeAllPairs(t, j, 1, 4)
			exchangeAllPairs(t, j, 2, 2) // the transport stays usable
			for _, tr := range j.ts {
				if err := tr.Err(); err != nil {
					t.Errorf("rank %d: Err() = %v after a clean exchange", tr.Rank(), err)
				}
			}
		})
	}
}

func TestConnsPerPeer(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 3, func(c *Config) { c.ConnsPerPeer = 2 })
	for _, tr := range j.ts {
		for p, list := range tr.peers {
			if p != tr.rank && len(list) != 2 {
				t.Fatalf("rank %d has %d connections to rank %d, want 2", tr.rank, len(list), p)
			}
		}
	}
	// Both connections must carry traffic for a spread of tags.
	used := map[*conn]bool{}
	for step := range 16 {
		used[j.ts[0].connFor(1, transport.Tag{Comm: 7, Seq: 1, Step: uint32(step)})] = true
	}
	if len(used) != 2 {
		t.Fatalf("16 tags used %d of 2 connections", len(used))
	}
	exchangeAllPairs(t, j, 1, 6)
}

// TestManyTagsInFlight keeps hundreds of messages per pair in flight at
// once and posts their receives in a random order.
func TestManyTagsInFlight(t *testing.T) {
	checkNoLeaks(t)
	const size, msgs = 3, 300
	j := startJob(t, size, func(c *Config) { c.ConnsPerPeer = 2 })
	ctx := waitCtx(t)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, tr := range j.ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			tagOf := func(i int) transport.Tag {
				return transport.Tag{Comm: uint32(1 + i%3), Seq: uint64(i / 3), Step: uint32(i % 5)}
			}
			sizeOf := func(src, dst, i int) int { return (src*31 + dst*17 + i*7919) % 70000 }
			var sends []*transport.Request
			for i := range msgs {
				for dst := range size {
					if dst != r {
						sends = append(sends, tr.Send(dst, tagOf(i), testDesc, payload(r, dst, tagOf(i), sizeOf(r, dst, i))))
					}
				}
			}
			type recv struct {
				src, i int
				req    *transport.Request
			}
			var recvs []recv
			for _, i := range rng.Perm(msgs) {
				for src := range size {
					if src != r {
						recvs = append(recvs, recv{src, i, tr.Recv(src, tagOf(i), testDesc, nil)})
					}
				}
			}
			for _, rv := range recvs {
				if err := rv.req.Wait(ctx); err != nil {
					errs[r] = err
					return
				}
				if want := payload(rv.src, r, tagOf(rv.i), sizeOf(rv.src, r, rv.i)); !bytes.Equal(rv.req.Data(), want) {
					errs[r] = fmt.Errorf("%v: wrong payload", rv.req)
					return
				}
			}
			errs[r] = waitAll(ctx, sends)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, tr := range j.ts {
		if st := tr.Stats(); st.MsgsSent != msgs*(size-1) || st.MsgsRecv != msgs*(size-1) {
			t.Errorf("rank %d stats %+v, want %d messages each way", tr.rank, st, msgs*(size-1))
		}
	}
}

// TestBackPressure sends far more than the receiver's unexpected budget
// with no receive posted: the sender must stall, the receiver's memory
// stay within budget, and everything arrive once receives are posted.
func TestBackPressure(t *testing.T) {
	checkNoLeaks(t)
	const (
		limit   = 512 << 10
		msgSize = 256 << 10
		msgs    = 64 // 16 MiB in all, 32 times the budget
	)
	j := startJob(t, 2, func(c *Config) {
		c.UnexpectedLimit = limit
		c.SocketBuffer = 64 << 10
	})
	ctx := waitCtx(t)
	sender, receiver := j.ts[0], j.ts[1]
	tagOf := func(i int) transport.Tag { return transport.Tag{Comm: 3, Seq: uint64(i)} }
	sends := make([]*transport.Request, msgs)
	for i := range sends {
		sends[i] = sender.Send(1, tagOf(i), testDesc, payload(0, 1, tagOf(i), msgSize))
	}
	// Let the pipe fill up.
	time.Sleep(300 * time.Millisecond)
	completed := 0
	for _, s := range sends {
		if done, err := s.Test(); done {
			if err != nil {
				t.Fatalf("send failed: %v", err)
			}
			completed++
		}
	}
	if completed == msgs {
		t.Fatalf("all %d sends completed with no receive posted: no back-pressure", msgs)
	}
	_, unexpected := receiver.m.Pending()
	if unexpected*msgSize > limit {
		t.Fatalf("receiver holds %d unexpected messages (%d bytes), budget %d", unexpected, unexpected*msgSize, limit)
	}
	if got := receiver.Stats().BytesRecv; got > limit+msgSize {
		t.Fatalf("receiver read %d bytes with nothing posted, budget %d", got, limit)
	}
	t.Logf("stalled: %d of %d sends complete, %d messages unexpected", completed, msgs, unexpected)

	// Post in reverse order: the reader is blocked on a message whose
	// receive is posted last.
	recvs := make([]*transport.Request, msgs)
	for i := msgs - 1; i >= 0; i-- {
		recvs[i] = receiver.Recv(0, tagOf(i), testDesc, make([]byte, msgSize))
	}
	for i, r := range recvs {
		if err := r.Wait(ctx); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if !bytes.Equal(r.Data(), payload(0, 1, tagOf(i), msgSize)) {
			t.Fatalf("receive %d: wrong payload", i)
		}
	}
	if err := waitAll(ctx, sends); err != nil {
		t.Fatal(err)
	}
}

// TestAbortPeerLost kills one rank: every other rank's pending receives
// must fail with ErrPeerLost naming it, quickly.
func TestAbortPeerLost(t *testing.T) {
	checkNoLeaks(t)
	const size, victim = 4, 2
	j := startJob(t, size, func(c *Config) { c.ConnsPerPeer = 2 })
	tag := transport.Tag{Comm: 1, Seq: 1}
	var pending [size][]*transport.Request
	for r, tr := range j.ts {
		for p := range size {
			if p != r {
				pending[r] = append(pending[r], tr.Recv(p, tag, testDesc, nil))
			}
		}
	}
	start := time.Now()
	j.ts[victim].Abort(errors.New("simulated crash"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for r := range size {
		for _, req := range pending[r] {
			err := req.Wait(ctx)
			if err == nil {
				t.Fatalf("rank %d: %v completed", r, req)
			}
			if r == victim {
				if !errors.Is(err, transport.ErrAborted) {
					t.Errorf("rank %d (aborted): %v failed with %v, want ErrAborted", r, req, err)
				}
				continue
			}
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != victim {
				t.Errorf("rank %d: %v failed with %v, want ErrPeerLost naming rank %d", r, req, err, victim)
			}
		}
	}
	t.Logf("all pending receives failed %v after the abort", time.Since(start))
	// Later operations fail at once with the sticky error.
	for r, tr := range j.ts {
		if r == victim {
			continue
		}
		peer := (r + 1) % size
		if peer == victim {
			peer = (peer + 1) % size
		}
		err := tr.Send(peer, transport.Tag{Comm: 1, Seq: 2}, testDesc, []byte("x")).Wait(ctx)
		if !errors.Is(err, transport.ErrPeerLost) {
			t.Errorf("rank %d: send after the loss: %v, want ErrPeerLost", r, err)
		}
		if !errors.Is(tr.Err(), transport.ErrPeerLost) {
			t.Errorf("rank %d: Err() = %v, want ErrPeerLost", r, tr.Err())
		}
	}
}

// TestCloseTellsPeers: a rank that closes is reported by its peers as
// having closed its connection, and Close fails its own pending requests.
func TestCloseTellsPeers(t *testing.T) {
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) { testCloseTellsPeers(t, conns) })
	}
}

func testCloseTellsPeers(t *testing.T, conns int) {
	checkNoLeaks(t)
	j := startJob(t, 3, func(c *Config) { c.ConnsPerPeer = conns })
	ctx := waitCtx(t)
	tag := transport.Tag{Comm: 1, Seq: 1}
	waiting := j.ts[1].Recv(0, tag, testDesc, nil)
	own := j.ts[0].Recv(2, tag, testDesc, nil)
	if err := j.ts[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.ts[0].Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := own.Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("pending receive on the closed rank: %v, want ErrClosed", err)
	}
	if err := j.ts[0].Send(1, tag, testDesc, nil).Wait(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("send after Close: %v, want ErrClosed", err)
	}
	err := waiting.Wait(ctx)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 0 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("receive from the closed rank: %v, want ErrPeerLost naming rank 0", err)
	}
	if want := "rank 0 closed its connection"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestFailOp(t *testing.T) {
	checkNoLeaks(t)
	const size = 3
	j := startJob(t, size, nil)
	ctx := waitCtx(t)
	failed := transport.Tag{Comm: 4, Seq: 10}
	other := transport.Tag{Comm: 4, Seq: 11}
	var doomed [size][]*transport.Request
	for r, tr := range j.ts {
		for p := range size {
			if p != r {
				doomed[r] = append(doomed[r], tr.Recv(p, failed, testDesc, nil))
			}
		}
	}
	cause := errors.New("rank 1 found a bad input")
	j.ts[1].FailOp(failed.Comm, failed.Seq, cause)
	for r := range size {
		for _, req := range doomed[r] {
			err := req.Wait(ctx)
			if r == 1 {
				if !errors.Is(err, cause) {
					t.Errorf("rank 1: %v: %v, want the local cause", req, err)
				}
				continue
			}
			var rf *transport.RemoteFailure
			if !errors.As(err, &rf) || rf.Peer != 1 || rf.Reason != cause.Error() || !errors.Is(err, transport.ErrAborted) {
				t.Errorf("rank %d: %v: %v, want RemoteFailure from rank 1 with the reason", r, req, err)
			}
		}
	}
	// A late message of the failed operation is dropped; other
	// operations and the transport are unaffected.
	late := j.ts[0].Send(2, failed, testDesc, []byte("late"))
	msg := j.ts[0].Send(2, other, testDesc, []byte("fine"))
	got := j.ts[2].Recv(0, other, testDesc, nil)
	if err := waitAll(ctx, []*transport.Request{late, msg, got}); err != nil {
		t.Fatal(err)
	}
	if string(got.Data()) != "fine" {
		t.Fatalf("got %q after FailOp, want %q", got.Data(), "fine")
	}
	if err := j.ts[2].Recv(0, failed, testDesc, nil).Wait(ctx); err == nil {
		t.Fatal("a receive of the failed operation posted later succeeded")
	}
	for _, tr := range j.ts {
		if err := tr.Err(); err != nil {
			t.Errorf("rank %d: Err() = %v after FailOp, want nil", tr.rank, err)
		}
	}
}

// TestFailOpLongReason: a reason longer than a fail-op frame allows is
// truncated, not an error.
func TestFailOpLongReason(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 2, nil)
	ctx := waitCtx(t)
	tag := transport.Tag{Comm: 1, Seq: 1}
	req := j.ts[1].Recv(0, tag, testDesc, nil)
	j.ts[0].FailOp(tag.Comm, tag.Seq, errors.New(string(bytes.Repeat([]byte("x"), 5000))))
	var rf *transport.RemoteFailure
	if err := req.Wait(ctx); !errors.As(err, &rf) || len(rf.Reason) != transport.MaxReasonLen {
		t.Fatalf("got %v, want a RemoteFailure with a %d-byte reason", err, transport.MaxReasonLen)
	}
	if err := j.ts[1].Err(); err != nil {
		t.Fatalf("Err() = %v", err)
	}
}

func TestMismatchedDesc(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 2, nil)
	ctx := waitCtx(t)
	tag := transport.Tag{Comm: 1, Seq: 1}
	other := testDesc
	other.Count++
	recv := j.ts[1].Recv(0, tag, testDesc, nil)
	if err := j.ts[0].Send(1, tag, other, []byte("abc")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv.Wait(ctx); !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 2, func(c *Config) { c.MaxMessage = 1 << 20 })
	ctx := waitCtx(t)
	tr := j.ts[0]
	tag := transport.Tag{Comm: 1, Seq: 1}
	for _, peer := range []int{-1, 0, 2} {
		if err := tr.Send(peer, tag, testDesc, nil).Wait(ctx); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Send to %d: %v, want ErrInvalid", peer, err)
		}
		if err := tr.Recv(peer, tag, testDesc, nil).Wait(ctx); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Recv from %d: %v, want ErrInvalid", peer, err)
		}
	}
	big := make([]byte, 1<<20+1)
	if err := tr.Send(1, tag, testDesc, big).Wait(ctx); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("oversized Send: %v, want ErrInvalid", err)
	}
	if err := tr.Err(); err != nil {
		t.Errorf("Err() = %v after invalid calls", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := waitCtx(t)
	cases := map[string]Config{
		"rank out of range": {Rank: 2, Size: 2, Token: testToken},
		"no store":          {Rank: 0, Size: 2, Token: testToken},
		"no token":          {Rank: 0, Size: 1},
		"unspecified ip":    {Rank: 0, Size: 1, Token: testToken, ListenIP: []byte{0, 0, 0, 0}},
		"too many conns":    {Rank: 0, Size: 1, Token: testToken, ConnsPerPeer: 1000},
	}
	for name, cfg := range cases {
		if _, err := New(ctx, cfg); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}

func TestSingleRank(t *testing.T) {
	checkNoLeaks(t)
	tr, err := New(waitCtx(t), Config{Rank: 0, Size: 1, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name() != "tcp" || tr.Size() != 1 || tr.Rank() != 0 {
		t.Fatalf("Name/Size/Rank = %q/%d/%d", tr.Name(), tr.Size(), tr.Rank())
	}
	tr.FailOp(1, 1, errors.New("nobody to tell"))
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewLocal(t *testing.T) {
	checkNoLeaks(t)
	ts, err := NewLocal(waitCtx(t), 3, func(c *Config) { c.ConnsPerPeer = 2 })
	if err != nil {
		t.Fatal(err)
	}
	j := &job{ts: ts}
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	exchangeAllPairs(t, j, 1, 2)
}
