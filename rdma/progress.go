package rdma

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// progress polls the completion queue until Close. While completions
// come it polls in batches; once idle it busy-polls for Config.Spin and
// then blocks on the completion channel, waking at least every KeepAlive
// to probe the peers.
//
// Goroutines waiting on a request poll too (waitPoll): one of them at a
// time busy-polls the completion queue itself, and meanwhile this loop
// parks, so that a process has one polling thread, not two. Waiters that
// found the poller's place taken sleep on their request; once the
// polling waiter is done this loop polls for them until they are done or
// give up. pollMu makes sure one goroutine at a time handles completions.
func (t *Transport) progress() {
	defer close(t.done)
	wcs := make([]verbs.WorkCompletion, pollBatch)
	lastWork, lastKA := time.Now(), time.Now()
	for !t.stop.Load() {
		t.pollMu.Lock()
		n, err := t.pollLocked(wcs)
		t.pollMu.Unlock()
		if err != nil {
			t.fail(fmt.Errorf("rdma: %w", err))
			return
		}
		if n > 0 {
			lastWork = time.Now()
			continue
		}
		now := time.Now()
		if now.Sub(lastKA) >= t.cfg.KeepAlive {
			lastKA = now
			if t.Err() == nil {
				for _, p := range t.peers {
					if p != nil {
						p.postKeepAlive()
					}
				}
			}
		}
		switch {
		case t.spinning.Load():
			t.parkWhileSpinning()
			lastWork = time.Now()
		case t.sleepers.Load() > 0:
			// Waiters sleep on their requests: poll for them, politely
			// (their goroutines, readied here, run on this thread).
			runtime.Gosched()
			yieldThread()
		case now.Sub(lastWork) < t.cfg.Spin:
			runtime.Gosched()
		default:
			if err := t.block(wcs); err != nil {
				t.fail(fmt.Errorf("rdma: %w", err))
				return
			}
			lastWork = time.Now()
		}
	}
}

// pollLocked polls the completion queue once and handles what came.
func (t *Transport) pollLocked(wcs []verbs.WorkCompletion) (int, error) {
	n, err := t.cq.Poll(wcs)
	if err != nil || n == 0 {
		return 0, err
	}
	t.handle(wcs[:n])
	return n, nil
}

// waitFor is the waiter of every request (transport.Request.SetWaiter):
// it polls (waitPoll), then blocks.
func (t *Transport) waitFor(ctx context.Context, r *transport.Request) error {
	t.waitPoll(r.Completion())
	return transport.AwaitRequest(ctx, r)
}

// waitPoll is called by a goroutine about to wait for a request. The
// first such goroutine busy-polls the completion queue itself until done
// is closed or Config.WaitSpin has passed, handing its thread to other
// goroutines and processes between polls (a completion for another
// request is handled all the same). While it does, the others sleep on
// done for at most WaitSpin, counted in sleepers so that the progress
// loop keeps polling for them when the poller leaves.
func (t *Transport) waitPoll(done <-chan struct{}) {
	if t.cfg.WaitSpin <= 0 || t.stop.Load() {
		return
	}
	if !t.spinning.CompareAndSwap(false, true) {
		t.sleepers.Add(1)
		timer := time.NewTimer(t.cfg.WaitSpin)
		select {
		case <-done:
		case <-timer.C:
		}
		timer.Stop()
		t.sleepers.Add(-1)
		return
	}
	defer func() {
		t.spinning.Store(false)
		t.kickProgress()
	}()
	var wcs [pollBatch]verbs.WorkCompletion
	deadline := time.Now().Add(t.cfg.WaitSpin)
	for i := 1; ; i++ {
		if t.pollMu.TryLock() {
			if t.stop.Load() { // Close is destroying the queues
				t.pollMu.Unlock()
				return
			}
			_, err := t.pollLocked(wcs[:])
			t.pollMu.Unlock()
			if err != nil {
				t.fail(fmt.Errorf("rdma: %w", err))
				return
			}
		}
		select {
		case <-done:
			return
		default:
		}
		if i%16 == 0 && (t.stop.Load() || time.Now().After(deadline)) {
			return
		}
		runtime.Gosched()
		// Other threads on this CPU (this process's, the peer rank's
		// when ranks share CPUs) get their turn.
		yieldThread()
	}
}

// kickProgress wakes the progress loop from parkWhileSpinning.
func (t *Transport) kickProgress() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// parkWhileSpinning parks the progress goroutine while a waiter polls,
// for at most KeepAlive. The waiter wakes it through kick when it stops:
// a hand-off between goroutines that needs no other thread to be woken.
func (t *Transport) parkWhileSpinning() {
	t.kaTimer.Reset(t.cfg.KeepAlive)
	select {
	case <-t.kick:
	case <-t.kaTimer.C:
	}
	t.kaTimer.Stop()
}

// block arms the CQ, polls once more (a completion that arrived before
// arming raises no event) and then waits for the channel, parked in Go's
// poller, for at most KeepAlive.
func (t *Transport) block(wcs []verbs.WorkCompletion) error {
	if err := t.cq.ReqNotify(false); err != nil {
		return err
	}
	t.pollMu.Lock()
	n, err := t.pollLocked(wcs)
	t.pollMu.Unlock()
	if err != nil || n > 0 {
		return err
	}
	if _, err := t.cq.WaitEvent(time.Now().Add(t.cfg.KeepAlive)); err != nil {
		return err
	}
	// Take any further events, so that they are acknowledged in batches.
	for {
		got, err := t.cq.GetEvent()
		if err != nil || !got {
			return err
		}
	}
}

func (t *Transport) handle(wcs []verbs.WorkCompletion) {
	for i := range wcs {
		wc := &wcs[i]
		kind, r, id := splitWRID(wc.ID)
		if r < 0 || r >= t.size || t.peers[r] == nil {
			continue // not ours; cannot happen
		}
		p := t.peers[r]
		if !p.touched {
			p.touched = true
			t.touched = append(t.touched, p)
		}
		if wc.Status != verbs.WCSuccess {
			t.completionError(p, kind, wc)
			if kind == wrEager && id == 1 {
				t.byeDone()
			}
			continue
		}
		switch kind {
		case wrRecv:
			p.recvToPost++
			t.onRecv(p, wc)
		case wrEager:
			p.completed(1, false)
			if id == 1 {
				t.byeDone()
			}
		case wrCredit:
			p.completed(1, false)
		case wrKeepalive:
			p.completed(1, true)
		case wrRndv:
			t.onRndvDone(p, id)
		}
	}
	// Receives are reposted and queues drained once per batch.
	for _, p := range t.touched {
		p.touched = false
		if t.Err() == nil && !p.isDead() {
			if err := p.postRecvs(); err != nil {
				t.peerLost(p.rank, err)
			}
		}
		p.drain()
	}
	t.touched = t.touched[:0]
	// A fail-op in this batch may have made room for parked messages.
	t.unparkLocked()
}

func (t *Transport) completionError(p *peer, kind uint8, wc *verbs.WorkCompletion) {
	if t.Err() != nil || p.isDead() {
		return // flushes after the transport failed or the peer closed
	}
	what := [...]string{"?", "receive", "eager send", "rendezvous write", "credit return", "keep-alive"}[min(int(kind), 5)]
	err := fmt.Errorf("%s to rank %d failed on %s qp %#x: %v (status %d, vendor error %#x)",
		what, p.rank, t.ep.ctx.Name(), wc.QPNum, wc.Status, uint32(wc.Status), wc.Vendor)
	if wc.Status == verbs.WCRetryExcErr {
		err = fmt.Errorf("%w: the peer died, or cannot be reached (check the GID index and the network)", err)
	}
	t.peerLost(p.rank, err)
}

func (t *Transport) onRecv(p *peer, wc *verbs.WorkCompletion) {
	if !wc.HasImm {
		t.protocolError(p.rank, errors.New("rdma: message without immediate"))
		return
	}
	kind, val := splitImm(wc.Imm)
	switch kind {
	case immEager:
		if int(val) >= p.slots {
			t.protocolError(p.rank, fmt.Errorf("rdma: eager write to slot %d of %d", val, p.slots))
			return
		}
		// The credits a slot carries are for the other direction: they
		// count on arrival, even for a slot that waits behind a parked
		// one, or two ranks flooding each other would hold each other's
		// credits in their parked slots (the suite's budget case).
		t.takeCredits(p, int(val))
		if len(p.parked) > 0 || !t.onEager(p, int(val)) {
			t.park(p, int(val))
		}
	case immDone:
		t.onDone(p, val)
	case immCredit:
		p.mu.Lock()
		p.credits += int(val)
		p.mu.Unlock()
	default:
		t.protocolError(p.rank, fmt.Errorf("rdma: unknown immediate %#x", wc.Imm))
	}
}
