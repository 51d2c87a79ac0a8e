package fallback

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// Who reads a connection.
//
// A reader goroutine that hands every message to the goroutine waiting
// for it costs a goroutine wake-up per message, and in Go waking a
// goroutine also wakes an idle thread to look for work (the runtime's
// wakep). On a machine with few cores that thread takes CPU from the very
// peer the next message comes from, and one such hand-off per message
// over a plain socket makes a round trip much slower than the socket's
// own (BenchmarkHandoffPingPong measures it against a direct read; the
// figures are in docs/DEFAULTS.md, "What the transport adds"). So a
// goroutine waiting for a receive reads the socket itself when nobody
// else is, and the runtime's network poller wakes exactly that
// goroutine when the data arrives, as it wakes the caller of a plain
// net.Conn Read.
//
// The read side of a connection has one owner at a time: nobody, a
// waiter, or the connection's background reader (readLoop), and only the
// owner touches the frameReader, the socket's read deadline and the read
// scratch fields of conn.
//
//   - A waiter (Wait on a receive from this connection) takes the read
//     side when it is free, reads frames, delivering every message it
//     meets (its own or others'), until its own receive completes, and
//     leaves the read side free without waking anyone: a caller looping
//     over sends and receives never hands a message over.
//   - When the read side is taken, a waiter waits for its receive, its
//     context or the read side coming free, whichever is first.
//   - The background reader reads when somebody needs progress without
//     reading: a pending receive watched through Done, a Wait on a send
//     the socket did not take (the peer may be blocked writing to us), a
//     write that failed, a transport failing or closing, and every
//     connection nobody reads when the transport's watchdog looks
//     (Transport.watchIdle, every idleCheck), so that a peer that dies
//     while nobody waits on it is still noticed. It reads until a waiter
//     is blocked on the read side, and hands over between frames (only
//     for convenience: the frameReader keeps its progress, so any owner
//     can resume a frame anywhere).
//   - A waiter never sleeps in the socket for longer than waiterTick
//     without looking at its receive and context: its reads carry a
//     deadline, which it renews rarely (setting one arms a runtime timer,
//     and arming a timer can itself wake an idle thread).

// waiterTick bounds how long a waiter reads without looking at its
// receive and context.
const waiterTick = 20 * time.Millisecond

type readOwner uint8

const (
	ownerNone readOwner = iota
	ownerWaiter
	ownerBackground
)

// readShare is the state of a connection's read side (see above).
type readShare struct {
	mu       sync.Mutex
	owner    readOwner
	blocked  int           // waiters waiting for the read side to come free
	blocks   atomic.Uint64 // how many times a waiter has blocked, ever (read unlocked)
	freed    chan struct{} // closed when the read side comes free for the blocked
	bgWanted bool          // the background reader should take the next turn
	watched  []*transport.Request
	ended    bool // the read side has failed or ended: nobody reads again
	bgCh     chan struct{}
	// deadline is the socket's read deadline (zero: none); the owner's.
	deadline time.Time
}

func (rs *readShare) init() {
	rs.bgCh = make(chan struct{}, 1)
	rs.bgWanted = true // a new connection is read in the background until a waiter comes
}

// wakeBackgroundLocked lets the background reader run if it has reason to.
func (c *conn) wakeBackgroundLocked() {
	rs := &c.rs
	if rs.owner != ownerNone || rs.blocked > 0 {
		return
	}
	if rs.ended || rs.bgWanted || c.watchingLocked() {
		select {
		case rs.bgCh <- struct{}{}:
		default:
		}
	}
}

// watchingLocked drops the watched receives that have completed and
// reports whether any is left.
func (c *conn) watchingLocked() bool {
	rs := &c.rs
	rs.watched = slices.DeleteFunc(rs.watched, (*transport.Request).Completed)
	return len(rs.watched) > 0
}

// release frees the read side: to the blocked waiters if there are any,
// else to the background reader if it has reason to run, else to nobody.
func (c *conn) release() {
	rs := &c.rs
	rs.mu.Lock()
	rs.owner = ownerNone
	rs.wakeBlockedLocked()
	c.wakeBackgroundLocked()
	rs.mu.Unlock()
}

// wakeBlockedLocked tells the blocked waiters the read side came free.
func (rs *readShare) wakeBlockedLocked() {
	if rs.freed != nil {
		close(rs.freed)
		rs.freed = nil
	}
}

// kickAndRelease frees the read side for the background reader (after
// any blocked waiters).
func (c *conn) kickAndRelease() {
	c.kick() // owned by us: this only marks the background reader wanted
	c.release()
}

// kick makes the background reader take the read side at its next chance.
func (c *conn) kick() {
	rs := &c.rs
	rs.mu.Lock()
	rs.bgWanted = true
	c.wakeBackgroundLocked()
	rs.mu.Unlock()
}

// nudge hands the read side to the background reader if nobody reads.
func (c *conn) nudge() {
	rs := &c.rs
	rs.mu.Lock()
	if rs.owner == ownerNone && !rs.ended {
		rs.bgWanted = true
		c.wakeBackgroundLocked()
	}
	rs.mu.Unlock()
}

// watch is the watcher of receives (transport.Request.SetWatcher).
func (c *conn) watch(r *transport.Request) {
	rs := &c.rs
	rs.mu.Lock()
	if !slices.Contains(rs.watched, r) {
		rs.watched = append(rs.watched, r)
	}
	c.wakeBackgroundLocked()
	rs.mu.Unlock()
}

// waitRecv is the waiter of receives (transport.Request.SetWaiter).
func (c *conn) waitRecv(ctx context.Context, r *transport.Request) error {
	rs := &c.rs
	done := r.Completion()
	for {
		if r.Completed() {
			return nil
		}
		rs.mu.Lock()
		if rs.owner == ownerNone && !rs.ended {
			rs.owner = ownerWaiter
			rs.mu.Unlock()
			return c.readFor(ctx, r)
		}
		var freed chan struct{}
		if !rs.ended {
			if rs.freed == nil {
				rs.freed = make(chan struct{})
			}
			freed = rs.freed
			rs.blocked++
			rs.blocks.Add(1)
		}
		rs.mu.Unlock()
		var err error
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		case <-freed:
		}
		if freed != nil {
			rs.mu.Lock()
			rs.blocked--
			c.wakeBackgroundLocked()
			rs.mu.Unlock()
		}
		if r.Completed() {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readFor reads frames as the read side's owner until r completes or ctx
// ends.
func (c *conn) readFor(ctx context.Context, r *transport.Request) error {
	c.renewDeadline()
	for {
		if r.Completed() {
			c.release()
			return nil
		}
		err := c.fr.readFrame(false)
		switch {
		case err == nil:
		case isTimeout(err):
			if err := ctx.Err(); err != nil {
				c.release()
				return err
			}
			c.renewDeadline()
		case errors.Is(err, transport.ErrNoBudget):
			// Delivering the next message must wait for room among the
			// unexpected ones, which only other operations can make:
			// the background reader does that waiting, not this caller.
			c.kickAndRelease()
			return transport.AwaitRequest(ctx, r)
		default:
			c.readEnded(err) // nobody reads after this
			return transport.AwaitRequest(ctx, r)
		}
	}
}

// renewDeadline gives the socket a read deadline at most waiterTick away,
// re-arming it only when less than half of that is left.
func (c *conn) renewDeadline() {
	now := time.Now()
	if d := c.rs.deadline; !d.IsZero() && d.Sub(now) > waiterTick/2 {
		return
	}
	c.rs.deadline = now.Add(waiterTick)
	_ = c.nc.SetReadDeadline(c.rs.deadline)
}

// waitSend is the waiter of sends. A send the socket has not taken may be
// waiting for the peer to read, and the peer may be waiting for us to
// read its own writes: if nobody reads here, the background reader does.
func (c *conn) waitSend(ctx context.Context, r *transport.Request) error {
	if r.Completed() {
		return nil
	}
	c.nudge()
	return transport.AwaitRequest(ctx, r)
}

// awaitTurn blocks the background reader until it has reason to read and
// the read side is free, and takes it; ok false means the read side
// ended. blocks is the count of blocked waiters when it took it (none
// was blocked then).
func (c *conn) awaitTurn() (blocks uint64, ok bool) {
	rs := &c.rs
	rs.mu.Lock()
	for !rs.ended && (rs.owner != ownerNone || rs.blocked > 0 || !rs.bgWanted && !c.watchingLocked()) {
		rs.mu.Unlock()
		<-rs.bgCh
		rs.mu.Lock()
	}
	if rs.ended {
		rs.mu.Unlock()
		return 0, false
	}
	rs.owner, rs.bgWanted = ownerBackground, false
	blocks = rs.blocks.Load()
	rs.mu.Unlock()
	if !rs.deadline.IsZero() {
		rs.deadline = time.Time{}
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	return blocks, true
}

// readInBackground reads frames as the read side's owner until a waiter
// has blocked on it since it took it (seen: the count of blocks then), and
// returns nil, or until the connection fails (the error). It hands over
// even if that waiter has meanwhile got its message (from this reader):
// its next wait would block again, and one hand-off per message is what
// the sharing is there to avoid.
func (c *conn) readInBackground(seen uint64) error {
	for {
		if c.fr.betweenFrames() && c.rs.blocks.Load() != seen {
			c.release()
			return nil
		}
		if err := c.fr.readFrame(true); err != nil && !isTimeout(err) {
			return err
		}
	}
}

// markReadEnded marks the read side finished: nobody reads again.
func (c *conn) markReadEnded() {
	rs := &c.rs
	rs.mu.Lock()
	rs.ended = true
	rs.owner = ownerNone
	rs.wakeBlockedLocked()
	select {
	case rs.bgCh <- struct{}{}:
	default:
	}
	rs.mu.Unlock()
}
