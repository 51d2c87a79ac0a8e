package fallback

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// TestAbortMidTransfer aborts ranks while large messages are being read
// into posted buffers. A failed receive's buffer must be the caller's
// again at once: the test overwrites it, and the race detector (which
// sees the read system calls) reports any reader still writing into it.
func TestAbortMidTransfer(t *testing.T) {
	for _, victim := range []int{0, 1} { // the sender, then the receiver
		t.Run([]string{"sender", "receiver"}[victim], func(t *testing.T) {
			checkNoLeaks(t)
			j := startJob(t, 2, nil)
			ctx := waitCtx(t)
			const msgSize, msgs = 8 << 20, 4
			var recvs, sends []*transport.Request
			bufs := make([][]byte, msgs)
			for i := range msgs {
				tag := transport.Tag{Comm: 1, Seq: uint64(i)}
				bufs[i] = make([]byte, msgSize)
				recvs = append(recvs, j.ts[1].Recv(0, tag, testDesc, bufs[i]))
				sends = append(sends, j.ts[0].Send(1, tag, testDesc, reference[:msgSize]))
			}
			time.Sleep(time.Millisecond) // let the transfer start
			j.ts[victim].Abort(errors.New("test abort"))
			for i, r := range recvs {
				err := r.Wait(ctx)
				if err == nil {
					continue // completed before the abort
				}
				clear(bufs[i]) // the buffer is ours again
				if victim == 1 && !errors.Is(err, transport.ErrAborted) {
					t.Errorf("receive %d on the aborted rank: %v, want ErrAborted", i, err)
				}
				if victim == 0 && !errors.Is(err, transport.ErrPeerLost) {
					t.Errorf("receive %d from the aborted rank: %v, want ErrPeerLost", i, err)
				}
			}
			for i, s := range sends {
				if err := s.Wait(ctx); err != nil && !errors.Is(err, transport.ErrAborted) && !errors.Is(err, transport.ErrPeerLost) {
					t.Errorf("send %d: %v, want success, ErrAborted or ErrPeerLost", i, err)
				}
			}
		})
	}
}

// TestCloseWhileStalled closes a receiver whose reader is blocked by
// back-pressure and whose sender is blocked writing: both sides must
// unblock promptly with the right errors.
func TestCloseWhileStalled(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 2, func(c *Config) {
		c.UnexpectedLimit = 64 << 10
		c.SocketBuffer = 64 << 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sends []*transport.Request
	for i := range 32 {
		sends = append(sends, j.ts[0].Send(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, reference[:256<<10]))
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := j.ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > wire.CloseTimeout+time.Second {
		t.Errorf("Close took %v", d)
	}
	failed := 0
	for i, s := range sends {
		err := s.Wait(ctx)
		if err == nil {
			continue
		}
		failed++
		if failed == 1 {
			t.Logf("send %d: %v", i, err)
		}
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, transport.ErrPeerLost) {
			t.Errorf("send %d: %v, want ErrPeerLost naming rank 1", i, err)
		}
	}
	if failed == 0 {
		t.Errorf("all 8 MiB of sends completed although the receiver read at most %d bytes", 64<<10)
	}
}

// TestAbortUnderLoad aborts a rank while every rank has traffic in flight
// in both directions (posted and unexpected, small and large): every
// request on every rank must still complete, with success or a loss or
// abort error, within the deadline, and nothing may leak.
func TestAbortUnderLoad(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			checkNoLeaks(t)
			const size, msgs = 4, 40
			j := startJob(t, size, func(c *Config) {
				c.ConnsPerPeer = 2
				c.UnexpectedLimit = 1 << 20
			})
			ctx := waitCtx(t)
			rng := rand.New(rand.NewPCG(uint64(round), 5))
			victim := rng.IntN(size)
			var reqs [size][]*transport.Request
			for r, tr := range j.ts {
				for i := range msgs {
					tag := transport.Tag{Comm: 1, Seq: uint64(i)}
					for p := range size {
						if p == r {
							continue
						}
						n := rng.IntN(1 << (4 + i%17))
						reqs[r] = append(reqs[r], tr.Send(p, tag, testDesc, reference[:n]))
						if i%2 == 0 { // odd messages stay unexpected
							reqs[r] = append(reqs[r], tr.Recv(p, tag, testDesc, make([]byte, n)))
						}
					}
				}
			}
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			j.ts[victim].Abort(errors.New("chaos"))
			for r := range size {
				for _, req := range reqs[r] {
					err := req.Wait(ctx)
					if err == nil || errors.Is(err, transport.ErrPeerLost) || errors.Is(err, transport.ErrAborted) {
						continue
					}
					t.Fatalf("rank %d: %v: unexpected error %v", r, req, err)
				}
				if r == victim {
					continue
				}
				for j.ts[r].Err() == nil && ctx.Err() == nil {
					time.Sleep(time.Millisecond) // its traffic may all have finished first
				}
				var pe *transport.PeerError
				if err := j.ts[r].Err(); !errors.As(err, &pe) || pe.Peer != victim || !errors.Is(err, transport.ErrPeerLost) {
					t.Errorf("rank %d: Err() = %v, want ErrPeerLost naming rank %d", r, err, victim)
				}
			}
		})
	}
}

// TestGoodbyeCarriesTheCause: a rank that failed (here: lost rank 2) and
// then closes tells the others why in its goodbye, so that an operation
// they fail because of that close names the root cause too, even when
// they have not (yet) seen it themselves. Rank 0's failure is injected on
// its connection to rank 2 only, so rank 1 learns of it solely from rank
// 0's goodbye.
func TestGoodbyeCarriesTheCause(t *testing.T) {
	checkNoLeaks(t)
	j := startJob(t, 3, nil)
	ctx := waitCtx(t)
	tag := transport.Tag{Comm: 9, Seq: 1}
	pending := j.ts[1].Recv(0, tag, testDesc, make([]byte, 8))
	j.ts[0].fail(&transport.PeerError{Peer: 2, Kind: transport.ErrPeerLost,
		Err: errors.New("receive from rank 2 on connection 0: EOF")}, 2)
	j.ts[0].Close()
	err := pending.Wait(ctx)
	if !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("rank 1's receive from the closed rank: %v, want ErrPeerLost", err)
	}
	for _, want := range []string{"rank 0 closed its connection", "after failing", "rank 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %q does not contain %q", err, want)
		}
	}
}
