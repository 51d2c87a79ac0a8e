//go:build linux

package shm

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// Progress. Whoever polls (a caller waiting for a request, or the
// transport's progress goroutine) takes pollMu, reads every peer's ring,
// reaps finished single-copy sends, writes queued frames, and then, with
// pollMu released, performs the single-copy reads it found due, so that
// another goroutine can poll meanwhile.
//
// Nothing polls without cause: every event that may need a poll (a frame
// written into this rank's inbox, room made in a ring this rank waits on,
// a single-copy read finished, a receive that lets a held ring go on)
// bumps the inbox's seq word. A poller that has seen no new seq for Spin
// sleeps: the progress goroutine in futexWait on seq, a waiting caller on
// its request. The inbox's awake word counts the pollers, and a peer that
// bumps seq calls futexWake only when it is zero: while a poller is
// active, messages pass with no system call on either side.

// poll does one pass if no one else is polling, and reports whether it
// did any work. s is seq as read before the pass.
func (t *Transport) poll(s uint32) bool {
	if !t.pollMu.TryLock() {
		return false
	}
	if t.stopping.Load() {
		t.pollMu.Unlock()
		return false
	}
	worked, pulls, bad, err := t.pollLocked()
	t.polledSeq.Store(s)
	t.pollMu.Unlock()
	for _, j := range pulls {
		t.pull(j)
		worked = true
	}
	if worked {
		t.completed()
	}
	if err != nil {
		t.fail(&transport.PeerError{Peer: bad.rank, Kind: transport.ErrProtocol,
			Err: fmt.Errorf("shm: ring from rank %d: %w", bad.rank, err)}, bad)
	}
	return worked
}

// pollLocked is one pass over the peers; it returns the pulls that are
// due, and the peer whose ring broke, if one did. Called with pollMu held.
func (t *Transport) pollLocked() (worked bool, pulls []*pullJob, bad *peer, err error) {
	for _, p := range t.local {
		if p.broken {
			continue
		}
		w, err := t.readRing(p, &pulls)
		if err != nil {
			p.broken = true
			return true, pulls, p, err
		}
		if p.serviceSends() {
			w = true
		}
		worked = worked || w
	}
	if t.pullsQueued.Load() {
		t.mu.Lock()
		pulls = append(pulls, t.pulls...)
		t.pulls = nil
		t.pullsQueued.Store(false)
		t.mu.Unlock()
	}
	return worked, pulls, nil, nil
}

// progress is the goroutine that polls while no caller does: for callers
// who select on Done or poll Test, and for the work that arrives between
// waits. It spins for Spin after its last work, then sleeps on seq.
func (t *Transport) progress() {
	defer close(t.progressDone)
	atomic.AddUint32(t.awake, 1)
	idle := time.Now()
	for n := 0; !t.stop.Load(); n++ {
		s := atomic.LoadUint32(t.seq)
		if t.poll(s) {
			idle = time.Now()
			continue
		}
		if atomic.LoadUint32(t.seq) != s {
			continue
		}
		if t.cfg.Spin > 0 && time.Since(idle) < t.cfg.Spin {
			pause(n)
			continue
		}
		// Lower awake, then look at seq once more: a peer that bumped
		// seq before seeing awake drop is seen here, and one after it
		// calls futexWake.
		atomic.AddUint32(t.awake, ^uint32(0))
		if atomic.LoadUint32(t.seq) == s && !t.stop.Load() {
			futexWait(t.seq, s)
		}
		atomic.AddUint32(t.awake, 1)
		idle = time.Now()
	}
	atomic.AddUint32(t.awake, ^uint32(0))
}

// maxSleepers bounds the waiters that sleep on the inbox's futex (each
// holds an OS thread while it sleeps); others block on their request.
const maxSleepers = 4

// waitFor is every request's Wait: it polls for Spin (longer while it
// finds work), so that the request's completion is seen by the goroutine
// waiting for it without a wake-up, and then sleeps on the inbox's futex
// word itself, polling whenever it is woken: a message that arrives then
// costs the sender one futex wake and wakes the waiting thread directly,
// instead of waking the progress goroutine that would then wake the
// waiter (BenchmarkPingPong under load).
func (t *Transport) waitFor(ctx context.Context, r *transport.Request) error {
	if !t.enterMapped() {
		return transport.AwaitRequest(ctx, r)
	}
	defer t.exitMapped()
	if t.cfg.Spin > 0 {
		t.spin(ctx, r)
	}
	if r.Completed() {
		return nil
	}
	if t.sleepers.Load() >= maxSleepers {
		return transport.AwaitRequest(ctx, r)
	}
	stop := context.AfterFunc(ctx, t.wakeSleepers)
	defer stop()
	for {
		s := atomic.LoadUint32(t.seq)
		if r.Completed() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.poll(s) || r.Completed() {
			continue
		}
		// Whoever completes r then does a read-modify-write of sleepers
		// (completed): after this increment it sees it and wakes this
		// goroutine (or changes seq first, so that futexWait returns at
		// once); before it, this increment reads its write and the
		// check below sees r complete.
		t.sleepers.Add(1)
		if !r.Completed() && ctx.Err() == nil {
			futexWait(t.seq, s)
		}
		t.sleepers.Add(-1)
	}
}

// completed is called after whatever may have completed requests that
// other goroutines wait for: it wakes the waiters sleeping on the futex
// (not the caller, which is not counted while it polls). The
// read-modify-write of sleepers pairs with the sleeper's increment, so
// that a sleeper either sees the completion or is woken.
func (t *Transport) completed() {
	if t.sleepers.Add(0) > 0 {
		t.wakeSleepers()
	}
}

func (t *Transport) wakeSleepers() {
	if t.enterMapped() {
		atomic.AddUint32(t.seq, 1)
		futexWake(t.seq)
		t.exitMapped()
	}
}

func (t *Transport) spin(ctx context.Context, r *transport.Request) {
	locked := transport.LockedThread(ctx)
	atomic.AddUint32(t.awake, 1)
	last := atomic.LoadUint32(t.seq) - 1 // poll once at once
	start := time.Now()
	for n := 0; !r.Completed(); n++ {
		if s := atomic.LoadUint32(t.seq); s != last {
			last = s
			if t.poll(s) {
				start = time.Now()
			}
			continue
		}
		if n%64 == 0 && (ctx.Err() != nil || time.Since(start) > t.cfg.Spin) {
			break
		}
		if locked {
			pauseLocked(n)
		} else {
			pause(n)
		}
	}
	// The last poller to leave wakes the progress goroutine if something
	// came that no complete poll has seen (the peer skipped the wake-up
	// because this goroutine was polling).
	if atomic.AddUint32(t.awake, ^uint32(0)) == 0 && atomic.LoadUint32(t.seq) != t.polledSeq.Load() {
		futexWake(t.seq)
	}
}

// pause lets other goroutines run, and every so often other threads of
// the machine, while a poller spins.
func pause(n int) {
	if n%32 == 31 {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	runtime.Gosched()
}

// pauseLocked is pause for a poller whose goroutine is locked to its
// thread (transport.LockedThread: a caller from C or Python), which must
// not call runtime.Gosched: a locked goroutine that yields hands its
// processor to another thread and sleeps until that thread hands it
// back. It polls on, and every so often lets other threads of the
// machine run; the goroutines queued on its processor are taken by the
// process's others. RawSyscall keeps the processor: a yield is short.
// python/tools/call_bench.py at P = 2: a small allreduce through the C
// ABI 7x faster than with Gosched (docs/PERFORMANCE.md, the cost of a
// call).
func pauseLocked(n int) {
	if n%32 == 31 {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// kick bumps this rank's own seq, for news that does not come from a peer
// (a receive for a parked or held message, a failed operation).
func (t *Transport) kick() {
	if t.enterMapped() {
		ring(t.seq, t.awake)
		t.exitMapped()
	}
}

// enterFill admits a pull (a write into a receive buffer) unless the
// transport is failing; exitFill ends it. fail waits for the pulls that
// were admitted before it fails the receives, so that no receive fails
// while its buffer is still being written.
func (t *Transport) enterFill() bool {
	t.filling.Add(1)
	if t.stopping.Load() {
		t.filling.Add(-1)
		return false
	}
	return true
}

func (t *Transport) exitFill() { t.filling.Add(-1) }

func (t *Transport) waitNoFill() {
	for t.filling.Load() > 0 {
		time.Sleep(20 * time.Microsecond)
	}
}

// enterMapped admits a goroutine that touches the mappings outside the
// locks (a spinning waiter, a kick) unless they are about to go.
func (t *Transport) enterMapped() bool {
	t.mapped.Add(1)
	if t.unmapped.Load() {
		t.mapped.Add(-1)
		return false
	}
	return true
}

func (t *Transport) exitMapped() { t.mapped.Add(-1) }
