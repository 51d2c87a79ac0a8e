package fallback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// Transport is one rank's TCP transport: a full mesh of authenticated
// connections to every other rank, ConnsPerPeer per peer, each with a
// writer goroutine (vectored writes straight from the callers' buffers,
// for frames Send could not write itself without waiting) and a reader
// goroutine (payloads read straight into posted receive buffers). It
// implements transport.Transport.
type Transport struct {
	cfg   Config
	rank  int
	size  int
	m     *transport.Matcher
	peers [][]*conn // peers[p] holds the connections to rank p; nil for this rank

	bytesSent, bytesRecv, msgsSent, msgsRecv atomic.Uint64

	sticky wire.Sticky
	caps   transport.Capabilities // Caps, made once (see transport.Capabilities)

	mu       sync.Mutex
	filling  int                       // readers writing into receive buffers right now
	idle     *sync.Cond                // signalled when filling drops to zero
	peerGone []int                     // per peer, connections that ended with goodbye
	onLost   func(peer int, err error) // set by Survive (survive.go)
	lostPeer map[int]error             // peers lost in the per-peer model

	closeOnce sync.Once
	stopWatch chan struct{}  // closed by Close: the watchdog returns
	watchdog  sync.WaitGroup // the goroutine of watchIdle
	readers   sync.WaitGroup
	writers   sync.WaitGroup
	aborters  sync.WaitGroup // goroutines started by fail
}

var _ transport.Transport = (*Transport)(nil)

// New sets up this rank's transport: it listens, publishes its address,
// connects to every other rank of the job and returns once the mesh is
// complete, or fails when ctx ends first. Every rank of the job must call
// New with the same Size, Token and ConnsPerPeer.
func New(ctx context.Context, cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:      cfg,
		rank:     cfg.Rank,
		size:     cfg.Size,
		m:        transport.NewMatcher(cfg.Rank, cfg.UnexpectedLimit),
		peerGone: make([]int, cfg.Size),
	}
	t.idle = sync.NewCond(&t.mu)
	t.caps = transport.Capabilities{Failed: t.sticky.Failed(), FailLocal: t.FailLocal, FailOpLocal: t.FailOpLocal, Survive: t.Survive}
	if cfg.Size == 1 {
		t.peers = make([][]*conn, 1)
		return t, nil
	}
	sockets, err := connectMesh(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	t.peers = make([][]*conn, cfg.Size)
	for p, list := range sockets {
		for i, nc := range list {
			t.peers[p] = append(t.peers[p], newConn(t, p, i, nc))
		}
	}
	for _, list := range t.peers {
		for _, c := range list {
			t.readers.Add(1)
			go c.readLoop()
			t.writers.Add(1)
			go c.writeLoop()
		}
	}
	t.stopWatch = make(chan struct{})
	t.watchdog.Add(1)
	go t.watchIdle()
	return t, nil
}

// idleCheck is how often the watchdog looks for connections nobody reads
// (a variable so that tests can keep it out of their way).
var idleCheck = 100 * time.Millisecond

// watchIdle hands every connection that nobody is reading to its
// background reader, every idleCheck: callers read their connections
// themselves while they wait (readshare.go), so without this a peer that
// died or closed while no caller waited on it would go unnoticed until
// someone did, and operations pending elsewhere would never learn that
// the job has lost a rank.
func (t *Transport) watchIdle() {
	defer t.watchdog.Done()
	tick := time.NewTicker(idleCheck)
	defer tick.Stop()
	for {
		select {
		case <-t.stopWatch:
			return
		case <-tick.C:
		}
		t.forEachConn(func(c *conn) { c.nudge() })
	}
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return "tcp" }

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

func (t *Transport) checkPeer(peer int) error {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return fmt.Errorf("%w: tcp: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, t.rank, peer, t.size)
	}
	return nil
}

// connFor picks the connection to peer that carries tag. A hash of the
// whole tag spreads the steps of one operation and concurrent operations
// over the connections, while one message never splits.
func (t *Transport) connFor(peer int, tag transport.Tag) *conn {
	list := t.peers[peer]
	if len(list) == 1 {
		return list[0]
	}
	h := uint64(tag.Comm)*0x9E3779B97F4A7C15 ^ tag.Seq*0xC2B2AE3D27D4EB4F ^ uint64(tag.Step)*0x165667B19E3779F9
	h ^= h >> 29
	return list[h%uint64(len(list))]
}

// Send implements transport.Transport. It writes the message to its
// connection's socket at once when the connection is idle and the kernel
// takes it without waiting, and otherwise queues (the rest of) it for the
// connection's writer; it never waits for the peer. The request completes
// when the whole message has been handed to the kernel.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if n > t.cfg.MaxMessage {
		return transport.Failed(peer, tag, true, fmt.Errorf("%w: tcp: rank %d: message of %d bytes to rank %d exceeds MaxMessage %d",
			transport.ErrInvalid, t.rank, n, peer, t.cfg.MaxMessage))
	}
	req := transport.NewRequest(peer, tag, true)
	c := t.connFor(peer, tag)
	req.SetWaiter(c.waitSendF)
	it := newSendItem(wire.Header{Kind: wire.Data, Tag: tag, Desc: desc, Length: uint64(n)}, bufs, req)
	c.send(it)
	return req
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	req := t.m.Post(peer, tag, desc, buf)
	if !req.Completed() {
		// Set before the caller has req: Wait and Done, the only
		// readers of these hooks, run in the caller's goroutines (a
		// reader completing req meanwhile touches neither).
		c := t.connFor(peer, tag)
		req.SetWaiter(c.waitRecvF)
		req.SetWatcher(c.watchF)
	}
	return req
}

// FailOp implements transport.Transport: the operation fails here at once
// and a fail-op frame carrying err's code and text tells every peer to
// fail it too.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {
	if err == nil {
		err = transport.ErrAborted
	}
	t.m.FailOp(comm, seq, err)
	payload := transport.AppendFailure(nil, transport.FailureOf(t.rank, err))
	for p, list := range t.peers {
		if p == t.rank {
			continue
		}
		h := wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Comm: comm, Seq: seq}, Length: uint64(len(payload))}
		it := newSendItem(h, [][]byte{payload}, nil)
		// A closed queue means the transport has failed, and with it
		// every operation on every rank: nothing more to tell.
		if err := list[0].q.push(it); err != nil {
			it.finish(err)
		}
	}
}

// Abort implements transport.Transport: everything pending and later fails
// with err, and the connections are closed without goodbye so every peer
// sees this rank lost.
func (t *Transport) Abort(err error) {
	if err == nil {
		err = errors.New("no reason given")
	}
	t.fail(fmt.Errorf("%w: %w", transport.ErrAborted, err), closeAll)
}

// Err implements transport.Transport.
func (t *Transport) Err() error { return t.sticky.Err() }

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats {
	return transport.Stats{
		BytesSent: t.bytesSent.Load(),
		BytesRecv: t.bytesRecv.Load(),
		MsgsSent:  t.msgsSent.Load(),
		MsgsRecv:  t.msgsRecv.Load(),
	}
}

// Close implements transport.Transport. Queued sends fail with
// transport.ErrClosed; messages already handed to the writers are flushed
// (for at most wire.CloseTimeout), each peer gets a goodbye so it reports this
// rank as closed rather than crashed (Close lingers until the peer has it:
// linger.go), and Close returns once every
// goroutine of the transport has stopped. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		// A transport that failed before Close tells its peers why in
		// its goodbyes.
		reason := ""
		if err := t.Err(); err != nil {
			reason = err.Error()
			if len(reason) > wire.MaxReasonLen {
				reason = reason[:wire.MaxReasonLen]
			}
		}
		t.sticky.Set(transport.ErrClosed)
		if t.stopWatch != nil {
			close(t.stopWatch)
			t.watchdog.Wait()
		}
		deadline := time.Now().Add(wire.CloseTimeout)
		t.forEachConn(func(c *conn) {
			_ = c.nc.SetWriteDeadline(deadline)
			c.q.close(transport.ErrClosed)
		})
		t.writers.Wait()
		goodbyeDeadline := time.Now().Add(wire.CloseTimeout)
		t.forEachConn(func(c *conn) { c.sayGoodbye(goodbyeDeadline, reason) })
		t.lingerAll(goodbyeDeadline)
		t.fail(transport.ErrClosed, closeAll)
		t.readers.Wait()
		t.aborters.Wait()
	})
	return nil
}

// Caps implements transport.Transport: TCP can be watched, failed on
// this rank alone, per operation or whole, and can survive a lost peer;
// it has no segment size of its own.
func (t *Transport) Caps() transport.Capabilities { return t.caps }

// Failed is closed once the transport has failed
// (transport.Capabilities.Failed).
func (t *Transport) Failed() <-chan struct{} { return t.sticky.Failed() }

// FailLocal (transport.Capabilities.FailLocal): everything pending and
// later fails with err on this rank, and no connection closes, so the
// peers learn of the loss behind err themselves, or from this rank's
// goodbye at Close, which carries err, instead of seeing this rank
// vanish.
func (t *Transport) FailLocal(err error) { t.fail(err, closeNone) }

// closeAll tells fail to close every connection; closeNone, none.
const (
	closeAll  = -1
	closeNone = -2
)

// fail makes err the transport's sticky error (unless one is set) and
// fails everything pending and queued with it. It closes the connections
// to closePeer, or all of them for closeAll (Abort, Close, protocol
// errors: the other ranks see this rank gone). Losing one peer does not close the connections to the
// others: each rank must learn of a death from the dead rank itself, with
// an error naming it, not from a cascade of closures naming whoever
// noticed first.
func (t *Transport) fail(err error, closePeer int) {
	first := t.sticky.Set(err)
	err = t.Err()
	t.forEachConn(func(c *conn) {
		c.q.close(err)
		if closePeer == closeAll || closePeer == c.peer {
			_ = c.nc.Close()
			c.kick() // someone must read the error and end the read side
		}
	})
	if first {
		t.cfg.Log.Warnf(logging.TCP, "transport failed: %v", err)
	}
	if closePeer == closeAll {
		t.abortMatcher(err)
		return
	}
	// Called from a reader or writer: do not block it (Close waits for
	// writers) behind a fill from a live peer.
	t.aborters.Add(1)
	go func() {
		defer t.aborters.Done()
		t.abortMatcher(err)
	}()
}

// abortMatcher fails every receive once no reader is writing into a
// receive buffer: failing one being written would let the caller reuse a
// buffer still being filled. Fills end quickly: none starts once the
// sticky error is set, those on closed connections fail at once, and one
// on a live connection ends with its frame, whose bytes the sender is
// already writing, or for a waiter within waiterTick (its read deadline).
func (t *Transport) abortMatcher(err error) {
	t.waitNoFill()
	t.m.Abort(err)
}

func (t *Transport) forEachConn(f func(c *conn)) {
	for _, list := range t.peers {
		for _, c := range list {
			f(c)
		}
	}
}

// enterFill implements fillGate.
func (t *Transport) enterFill() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sticky.Err() != nil {
		return false
	}
	t.filling++
	return true
}

// exitFill implements fillGate.
func (t *Transport) exitFill() {
	t.mu.Lock()
	t.filling--
	if t.filling == 0 {
		t.idle.Broadcast()
	}
	t.mu.Unlock()
}

func (t *Transport) waitNoFill() {
	t.mu.Lock()
	for t.filling > 0 {
		t.idle.Wait()
	}
	t.mu.Unlock()
}

// connClosedByPeer records that a connection to peer ended after its
// goodbye. Once all of them have, nothing more can arrive from peer and
// the transport fails; the connections to the other ranks stay up until
// Close, which says goodbye on them.
func (t *Transport) connClosedByPeer(peer int) {
	t.mu.Lock()
	t.peerGone[peer]++
	all := t.peerGone[peer] == len(t.peers[peer])
	t.mu.Unlock()
	if !all {
		return
	}
	// A graceful close is not a failure of the job: the peer finished
	// (its earlier messages were all delivered before the goodbye).
	// Only what still involves it fails; operations among the other
	// ranks go on.
	err := &transport.PeerError{Peer: peer, Kind: transport.ErrPeerLost,
		Err: fmt.Errorf("rank %d closed its connection%s", peer, t.byeCause(peer))}
	t.m.FailPeer(peer, err)
	for _, c := range t.peers[peer] {
		c.q.close(err)
	}
}

// byeCause is ", after failing: REASON" when a goodbye from peer said why
// it closed, "" otherwise.
func (t *Transport) byeCause(peer int) string {
	for _, c := range t.peers[peer] {
		if r := c.goodbyeReason(); r != "" {
			return ", after failing: " + r
		}
	}
	return ""
}

// saidGoodbye reports whether some connection to peer received a goodbye.
func (t *Transport) saidGoodbye(peer int) bool {
	for _, c := range t.peers[peer] {
		if c.goodbye.Load() {
			return true
		}
	}
	return false
}

// lost builds the error for a connection to peer that broke while doing
// what (e.g. "send to").
func (t *Transport) lost(c *conn, what string, cause error) error {
	if t.saidGoodbye(c.peer) {
		cause = fmt.Errorf("rank %d closed its connection%s (%w)", c.peer, t.byeCause(c.peer), cause)
	} else {
		// No "rank N:" of this rank: the error that carries the cause
		// names it, and a peer told through the goodbye names the
		// sender ("rank N closed its connection, after failing: ...").
		cause = fmt.Errorf("%s rank %d on connection %d: %w", what, c.peer, c.index, cause)
	}
	return &transport.PeerError{Peer: c.peer, Kind: transport.ErrPeerLost, Err: cause}
}

// isStopping reports whether the transport has failed or is closing, in
// which case connection errors are consequences, not causes.
func (t *Transport) isStopping() bool {
	return t.Err() != nil
}
