//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// After set-up, each peer's unix socket carries at most one message, just
// before this rank closes it: sockBye (a goodbye is in the ring, behind
// the last messages), sockClosed (this rank closed, but found no room in
// the ring for its goodbye: the peer treats the close as graceful at once;
// the text is this rank's earlier failure, if any) or sockLost (this rank
// aborted; the text says why). A socket that ends with neither
// means the peer's process ended without closing its transport; the
// kernel closes the socket at once when a process dies, so a death is
// seen as fast as over TCP, and one goroutine per peer, blocked in a read
// through the runtime's poller, watches for it.
const (
	sockBye    = 1
	sockLost   = 2
	sockClosed = 3
)

func writeSockMsg(c *net.UnixConn, kind byte, reason string) error {
	if len(reason) > wire.MaxReasonLen {
		reason = reason[:wire.MaxReasonLen]
	}
	b := make([]byte, 3+len(reason))
	b[0] = kind
	binary.LittleEndian.PutUint16(b[1:], uint16(len(reason)))
	copy(b[3:], reason)
	_ = c.SetWriteDeadline(time.Now().Add(wire.CloseTimeout))
	_, err := c.Write(b)
	return err
}

func readSockMsg(c *net.UnixConn) (kind byte, reason string, err error) {
	var h [3]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, "", err
	}
	n := binary.LittleEndian.Uint16(h[1:])
	if h[0] < sockBye || h[0] > sockClosed || n > wire.MaxReasonLen {
		return 0, "", wire.ProtocolErrorf("bad socket message (kind %d, %d bytes)", h[0], n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return 0, "", err
	}
	return h[0], string(b), nil
}

// watch waits for the peer's socket to end and fails the transport,
// naming the peer, unless the peer closed gracefully or this rank is
// stopping anyway.
func (t *Transport) watch(p *peer) {
	defer t.watchers.Done()
	kind, reason, err := readSockMsg(p.conn)
	if err == nil && kind == sockBye {
		t.kick() // its goodbye is in the ring
		return
	}
	if err == nil && kind == sockClosed {
		p.writerGone.Store(true)
		t.peerClosed(p, t.lostError(p.rank, "rank %d closed its transport%s (with no room in its ring for a goodbye: its last messages may be lost)",
			p.rank, afterFailing(reason)))
		t.kick() // a frame it left unfinished fails
		return
	}
	if t.Err() != nil || p.byeReceived.Load() {
		return
	}
	var cause string
	switch {
	case err == nil:
		cause = reason
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		cause = fmt.Sprintf("the process of rank %d (pid %d) ended without closing its transport (killed or crashed?)", p.rank, p.pid)
	default:
		cause = fmt.Sprintf("its socket failed: %v", err)
	}
	t.cfg.Logf("shm: lost rank %d: %s", p.rank, cause)
	t.fail(t.lostError(p.rank, "%s", cause), p)
}

// fail makes err the transport's sticky error (the first one wins) and
// fails everything pending and later: polls and pulls stop (those under
// way finish first, so no receive fails while its buffer is written),
// sends to every peer fail or, if a peer is reading them, complete once it
// has (lost, the peer that is gone, reads nothing more), and the matcher
// fails every receive. No peer is told: each learns of a lost rank itself,
// and of this rank's failure from its goodbye or abort.
func (t *Transport) fail(err error, lost *peer) {
	if !t.sticky.Set(err) {
		return
	}
	if lost != nil {
		lost.dead.Store(true)
	}
	t.stopping.Store(true)
	t.pollMu.Lock()
	t.pollMu.Unlock() // the poll under way has ended
	t.waitNoFill()
	for _, p := range t.local {
		p.failSends(err, p == lost)
	}
	t.mu.Lock()
	clear(t.parked)
	clear(t.parkedOps)
	t.pulls = nil
	t.pullsQueued.Store(false)
	t.mu.Unlock()
	t.m.Abort(err)
	t.completed()
}

// peerClosed handles a peer's goodbye: a graceful close is not a failure
// of the job. Everything it sent before has been delivered (the goodbye
// is its last frame); what still involves it fails naming it, and the
// transport goes on with the other peers. Called by a poller.
func (t *Transport) peerClosed(p *peer, err error) {
	t.mu.Lock()
	if p.gone != nil || t.sticky.Err() != nil {
		t.mu.Unlock()
		return
	}
	p.gone = err
	// Under t.mu, so that no receive from the peer is posted between
	// this and the matcher knowing it is gone.
	t.m.FailPeer(p.rank, err)
	for k := range t.parked {
		if k.peer == p.rank {
			t.unparkLocked(k) // the peer withdrew it before its goodbye
		}
	}
	withdrawn := p.withdrawn
	p.withdrawn = nil
	t.mu.Unlock()
	for _, c := range withdrawn {
		c.Fail(err)
	}
	t.cfg.Logf("shm: %v", err)
	p.failSends(err, true)
	t.completed()
}

// failWithdrawn fails a receive whose sender withdrew its single-copy
// offer. A sender withdraws when it fails or closes, and its goodbye (or
// its death) follows, saying why: the receive fails with that, so that
// its error leads to the cause (a rank that failed because a third one
// died names that one), not with the bare withdrawal. If the peer's
// goodbye or this transport's failure came first, it fails at once.
// After this transport fails, the matcher's Abort fails it.
func (t *Transport) failWithdrawn(p *peer, c transport.Claimed) {
	t.mu.Lock()
	why := p.gone
	if why == nil {
		why = t.sticky.Err()
	}
	if why == nil {
		p.withdrawn = append(p.withdrawn, c)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	c.Fail(why)
}

// hangUp tells every peer at once, over its socket, that this rank is
// gone and why, and closes the sockets.
func (t *Transport) hangUp(reason string) {
	if t.hungUp.Swap(true) {
		return
	}
	for _, p := range t.local {
		_ = writeSockMsg(p.conn, sockLost, reason)
		p.conn.Close()
	}
}

// Close implements transport.Transport. Pending and later requests fail
// with transport.ErrClosed; the frame being written to each peer is
// finished and a goodbye follows it (waiting at most wire.CloseTimeout for
// room), carrying this rank's earlier failure if it had one, so each peer
// reports this rank as closed rather than lost; single-copy sends a peer
// is reading complete first. Close returns once the transport's
// goroutines have stopped and its mappings are gone. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(t.close)
	return nil
}

func (t *Transport) close() {
	reason := ""
	if err := t.Err(); err != nil {
		reason = err.Error()
	}
	atomic.StoreUint32(t.closed, 1) // peers' sends to this rank fail from now on
	t.sticky.Set(transport.ErrClosed)
	t.stopping.Store(true)
	t.pollMu.Lock()
	t.pollMu.Unlock() // the poll under way has ended
	t.waitNoFill()    // reads from the peers' memory end before the goodbyes
	if !t.hungUp.Swap(true) {
		deadline := time.Now().Add(wire.CloseTimeout)
		for _, p := range t.local {
			if p.sayGoodbye(deadline, reason) {
				_ = writeSockMsg(p.conn, sockBye, "")
			} else {
				_ = writeSockMsg(p.conn, sockClosed, reason)
			}
			p.conn.Close()
		}
	}
	for _, p := range t.local {
		p.failSends(transport.ErrClosed, true)
	}
	t.m.Abort(transport.ErrClosed)
	t.completed()
	t.stop.Store(true)
	atomic.AddUint32(t.seq, 1)
	futexWake(t.seq)
	<-t.progressDone
	t.watchers.Wait()
	t.release()
}

func afterFailing(reason string) string {
	if reason == "" {
		return ""
	}
	return ", after failing: " + reason
}

// sayGoodbye finishes the frame under way to the peer, fails what is
// queued behind it, and writes the goodbye, carrying reason (this rank's
// failure, if any); it reports whether the goodbye is in the ring. Not
// for a peer that closed or died, or whose ring holds a frame cut short.
func (p *peer) sayGoodbye(deadline time.Time, reason string) bool {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.dead.Load() || p.byeReceived.Load() || atomic.LoadUint32(p.remoteClose) != 0 {
		return false
	}
	if len(p.queue) > 0 && p.queue[0].started {
		if p.waitPut(p.queue[0], deadline) {
			p.written(p.queue[0])
			p.queue[0] = nil
			p.queue = p.queue[1:]
		}
	}
	p.failQueueLocked(transport.ErrClosed)
	p.withdrawLocked(transport.ErrClosed, false)
	if p.outCut {
		return false
	}
	if len(reason) > wire.MaxReasonLen {
		reason = reason[:wire.MaxReasonLen]
	}
	bye := &outItem{h: wire.Header{Kind: wire.Goodbye, Length: uint64(len(reason))}, bufs: [][]byte{[]byte(reason)}}
	ok := p.waitPut(bye, deadline)
	if !ok && bye.started {
		p.outCut = true
	}
	return ok
}

// waitPut writes it whole, waiting for room until deadline.
func (p *peer) waitPut(it *outItem, deadline time.Time) bool {
	for {
		done := p.putLocked(it)
		p.flushLocked()
		if done {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// release unmaps everything and closes what set-up opened, once no
// goroutine can touch the mappings.
func (t *Transport) release() {
	t.unmapped.Store(true)
	for t.mapped.Load() > 0 {
		time.Sleep(20 * time.Microsecond)
	}
	t.pollMu.Lock()
	defer t.pollMu.Unlock()
	for _, p := range t.local {
		p.sendMu.Lock()
		if p.sendErr == nil {
			p.sendErr = transport.ErrClosed
		}
		unmap(p.remote)
		p.remote = nil
		p.sendMu.Unlock()
		if p.conn != nil {
			p.conn.Close()
		}
	}
	unmap(t.inbox)
	t.inbox = nil
}
