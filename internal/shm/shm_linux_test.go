//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

var testDesc = transport.Desc{Kind: transport.OpP2P}

func ringBytes(tr *Transport, peer int) uint64 {
	p := tr.peers[peer]
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.out.pos
}

// TestSingleCopyPath: a large message sent before its receive is posted
// stays with the sender (no unexpected buffer, nothing but its
// announcement in the ring) and is read once, straight into the buffer of
// the receive posted later; with NoSingleCopy, forced as where the kernel
// refuses cross-process reads, the same message goes through the ring and
// the choice is logged once per rank.
func TestSingleCopyPath(t *testing.T) {
	const n = 8 << 20
	for _, forced := range []bool{false, true} {
		log := &logBuffer{}
		ts := startJob(t, 2, log, func(c *Config) { c.NoSingleCopy = forced })
		if got := ts[1].SingleCopy(0); got == forced {
			t.Fatalf("NoSingleCopy %v: SingleCopy(0) = %v", forced, got)
		}
		msg := payload(1, 0, n)
		tag := transport.Tag{Comm: 1, Seq: 1}
		before := ringBytes(ts[1], 0)
		s := ts[1].Send(0, tag, testDesc, msg[:1000], msg[1000:])
		time.Sleep(50 * time.Millisecond)
		if !forced {
			if posted, unexp := ts[0].m.Pending(); unexp != 0 || posted != 0 {
				t.Errorf("a single-copy message waiting for its receive took an unexpected buffer (%d posted, %d unexpected)", posted, unexp)
			}
			if done, _ := s.Test(); done {
				t.Errorf("a single-copy send completed before its receive was posted")
			}
		}
		buf := make([]byte, n)
		r := ts[0].Recv(1, tag, testDesc, buf)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if !bytes.Equal(r.Data(), msg) || &r.Data()[0] != &buf[0] {
			t.Fatalf("NoSingleCopy %v: wrong payload, or not in the posted buffer", forced)
		}
		through := ringBytes(ts[1], 0) - before
		if forced && through < n || !forced && through > 4*hdrSize {
			t.Errorf("NoSingleCopy %v: %d bytes through the ring for an %d-byte message", forced, through, n)
		}
		want := "are read straight from the sender's memory"
		if forced {
			want = "all go through the rings: single copy turned off"
		}
		if got := log.count(want); got != 2 {
			t.Errorf("NoSingleCopy %v: %d log lines say %q, want one per rank", forced, got, want)
		}
	}
}

// TestCloseWithFullRing: a rank that closes while its ring to a peer is
// full (the peer reads nothing: its budget is spent) cannot write its
// goodbye there; the peer still sees a graceful close: its transport goes
// on, receives from the closed rank fail naming it, and what was in the
// ring is delivered when its receives are posted.
func TestCloseWithFullRing(t *testing.T) {
	ts := startJob(t, 3, nil, func(c *Config) { c.UnexpectedLimit = 4 << 10; c.RingSize = minRingSize })
	const count = 64
	for i := range count {
		ts[1].Send(0, transport.Tag{Comm: 1, Seq: 1, Step: uint32(i)}, testDesc, payload(1, 0, 4<<10))
	}
	time.Sleep(50 * time.Millisecond)
	pending := ts[0].Recv(1, transport.Tag{Comm: 1, Seq: 2}, testDesc, nil)
	ts[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var pe *transport.PeerError
	if err := pending.Wait(ctx); !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("rank 0: a receive from the closed rank 1: %v, want an error naming rank 1", err)
	}
	if err := ts[0].Err(); err != nil {
		t.Fatalf("rank 0's transport failed when rank 1 closed: %v", err)
	}
	r := ts[0].Recv(1, transport.Tag{Comm: 1, Seq: 1, Step: 0}, testDesc, nil)
	if err := r.Wait(ctx); err != nil || !bytes.Equal(r.Data(), payload(1, 0, 4<<10)) {
		t.Fatalf("rank 0: the first message rank 1 sent before closing: %v", err)
	}
	s := ts[2].Send(0, transport.Tag{Comm: 2}, testDesc, []byte("still here"))
	r = ts[0].Recv(2, transport.Tag{Comm: 2}, testDesc, nil)
	if err := r.Wait(ctx); err != nil || string(r.Data()) != "still here" {
		t.Fatalf("rank 2 to rank 0 after rank 1 closed: %v", err)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIdleUsesNoCPU: an idle transport sleeps: the process's CPU time
// over a second of idleness, with every rank connected and waiting on a
// receive, stays a small fraction of that second.
func TestIdleUsesNoCPU(t *testing.T) {
	ts := startJob(t, 4, nil, nil)
	var reqs []*transport.Request
	for r, tr := range ts {
		reqs = append(reqs, tr.Recv((r+1)%4, transport.Tag{Comm: 1}, testDesc, nil))
	}
	// Waiters that spin, then sleep.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	for _, r := range reqs {
		go r.Wait(ctx)
	}
	time.Sleep(100 * time.Millisecond)
	cpu, wall := processCPU(), time.Now()
	time.Sleep(time.Second)
	used, elapsed := processCPU()-cpu, time.Since(wall)
	t.Logf("%v of CPU in %v idle", used, elapsed)
	if used > elapsed/20 {
		t.Errorf("idle transports used %v of CPU in %v", used, elapsed)
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestNotOnThisHost: a rank outside Peers is refused, and a peer that is
// not reachable over an abstract socket (another network namespace, or
// here a name nobody listens on) fails the set-up naming it.
func TestNotOnThisHost(t *testing.T) {
	ts := startJob(t, 3, nil, func(c *Config) {
		if c.Rank < 2 {
			c.Peers = []int{0, 1}
		} else {
			c.Peers = []int{2}
		}
	})
	if err := ts[0].Send(2, transport.Tag{}, testDesc, nil).Err(); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("send to a rank on another host: %v, want ErrInvalid", err)
	}
	store := newFixedStore("shm/addr/0", "@sparcml-shm-nobody-listens-here")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := New(ctx, Config{Rank: 1, Size: 2, Store: store, Token: testToken})
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("New with a peer in no reachable namespace: %v, want connection refused", err)
	}
	t.Logf("%v", err)
}

// TestWithdrawAfterRead: a single-copy send that its receiver has read
// but the sender not yet reaped completes without error when the sender
// then stops sending to that peer (its goodbye, a failure): only offers
// not yet read are withdrawn and fail.
func TestWithdrawAfterRead(t *testing.T) {
	ts := startJob(t, 2, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ts[1].pollMu.Lock() // rank 1 reaps nothing meanwhile
	read := ts[1].Send(0, transport.Tag{Comm: 1, Seq: 1}, testDesc, payload(1, 0, 1<<20))
	unread := ts[1].Send(0, transport.Tag{Comm: 1, Seq: 2}, testDesc, payload(1, 0, 1<<20))
	r := ts[0].Recv(1, transport.Tag{Comm: 1, Seq: 1}, testDesc, nil)
	err := r.Wait(ctx)
	cause := errors.New("stopped on purpose")
	ts[1].peers[0].failSends(cause, false)
	ts[1].pollMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := read.Wait(ctx); err != nil {
		t.Errorf("a send read before the sender withdrew its offers: %v, want nil", err)
	}
	if err := unread.Wait(ctx); !errors.Is(err, cause) {
		t.Errorf("a send not read when the sender withdrew its offers: %v, want the cause", err)
	}
}

// TestWithdrawnSendNamesTheCause: a receive whose single-copy offer the
// sender withdrew, because it failed, fails with the cause the sender's
// goodbye carries (as a rank that failed because a third one died must
// name that one), not with the bare withdrawal.
func TestWithdrawnSendNamesTheCause(t *testing.T) {
	ts := startJob(t, 2, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	tag := transport.Tag{Comm: 1, Seq: 1}
	ts[0].pollMu.Lock() // rank 0 reads nothing until rank 1 has withdrawn
	unread := ts[1].Send(0, tag, testDesc, payload(1, 0, 1<<20))
	cause := errors.New("rank 7 stopped on purpose")
	ts[1].fail(cause, nil)
	closed := make(chan error, 1)
	go func() { closed <- ts[1].Close() }()
	r := ts[0].Recv(1, tag, testDesc, nil)
	time.Sleep(50 * time.Millisecond) // rank 1's goodbye is on its way
	ts[0].pollMu.Unlock()
	err := r.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), cause.Error()) {
		t.Errorf("the receive of a withdrawn send: %v, want the sender's cause %q", err, cause)
	}
	if err := unread.Wait(ctx); !errors.Is(err, cause) {
		t.Errorf("the withdrawn send: %v, want the cause", err)
	}
	<-closed
}

// A send to a peer that has begun to close (its closed word is set, its
// goodbye not yet written) waits for the goodbye and fails with the
// peer's reason: a rank that failed because a third one died is not
// reported as merely closed.
func TestSendToClosingPeerNamesTheCause(t *testing.T) {
	ts := startJob(t, 2, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cause := errors.New("rank 7 stopped on purpose")
	ts[1].fail(cause, nil)
	atomic.StoreUint32(ts[1].closed, 1) // as Close does first
	sent := ts[0].Send(1, transport.Tag{Comm: 1, Seq: 1}, testDesc, payload(1, 0, 64))
	closed := make(chan error, 1)
	go func() { closed <- ts[1].Close() }()
	if err := sent.Wait(ctx); err == nil || !strings.Contains(err.Error(), cause.Error()) {
		t.Errorf("a send to a closing peer: %v, want the peer's cause %q", err, cause)
	}
	<-closed
}

// TestActivePeersNoWakeups: while both ranks poll (waiters spinning), a
// stream of round trips passes with no futex wake-up: the writer sees the
// reader's awake count and skips the system call.
func TestActivePeersNoWakeups(t *testing.T) {
	ts := startJob(t, 2, nil, func(c *Config) { c.Spin = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const n = 2000
	echo := make(chan error, 1)
	go func() {
		for i := range n {
			r := ts[1].Recv(0, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, nil)
			if err := r.Wait(ctx); err != nil {
				echo <- err
				return
			}
			ts[1].Send(0, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, r.Data())
		}
		echo <- nil
	}()
	msg := make([]byte, 64)
	time.Sleep(10 * time.Millisecond) // both sides are polling
	before := futexWakes.Load()
	for i := range n {
		r := ts[0].Recv(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, nil)
		ts[0].Send(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, msg)
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wakes := futexWakes.Load() - before
	if err := <-echo; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d futex wakes in %d round trips", wakes, n)
	if wakes > n/100 {
		t.Errorf("%d futex wakes in %d round trips between polling ranks", wakes, n)
	}
}
