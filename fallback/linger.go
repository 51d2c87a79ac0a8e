package fallback

import (
	"net"
	"sync"
	"time"
)

// Lingering close. A socket closed with data from the peer still unread
// is reset at once (RST), and the kernel discards what this side had
// queued but not yet transmitted: on a slow link that can be the tail of
// a large frame and the goodbye behind it, so the peer, mid-frame, reports
// a reset naming this rank instead of the cause the goodbye carried
// (test/cluster TestHostKilledNamed). Close therefore shuts down writing
// after the goodbye (a FIN queued behind the data) and waits until the
// peer's kernel has acknowledged every byte before it closes. A reset
// after that loses nothing: the peer reads what it holds, goodbye
// included, before it sees the reset.

// lingerStall is how long the unacknowledged bytes of a connection may
// stay the same before Close stops waiting for them: a partitioned peer
// acknowledges nothing, and Close must not wait its whole wire.CloseTimeout.
// It spans a few retransmission timeouts (200 ms at least, doubling with
// each loss), so that a lossy link is not taken for a partition.
const lingerStall = time.Second

// lingerAll lingers on every connection at once, until deadline at most.
func (t *Transport) lingerAll(deadline time.Time) {
	var wg sync.WaitGroup
	t.forEachConn(func(c *conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.linger(deadline)
		}()
	})
	wg.Wait()
}

// linger shuts down c's write side and waits for the peer (lingerTCP),
// unless a write failed: then the stream is cut mid-frame and there is no
// goodbye to deliver.
func (c *conn) linger(deadline time.Time) {
	if c.broken.Load() {
		return
	}
	lingerTCP(c.nc, deadline)
}

// lingerTCP shuts down nc's write side and waits until the peer has
// acknowledged everything written to it, the connection is closed (the
// peer reset it), progress stalls for lingerStall, or deadline passes. It
// waits even if this side has stopped reading (a transport that failed
// reads no more): what matters is what the peer has not yet received.
func lingerTCP(nc *net.TCPConn, deadline time.Time) {
	_ = nc.CloseWrite()
	last, changed := -1, time.Now()
	for {
		n, err := unackedBytes(nc)
		if err != nil || n == 0 {
			return
		}
		now := time.Now()
		if n != last {
			last, changed = n, now
		}
		if now.After(deadline) || now.Sub(changed) > lingerStall {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
