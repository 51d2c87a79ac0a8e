package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// InMemory is a Transport between goroutines of one process. Collectives
// run over it unchanged, so they can be tested fast and under the race
// detector. A send copies the payload straight into the receiver's buffer
// when the receive is already posted, and into a buffer of the receiver's
// otherwise, within the receiver's per-peer budget of unexpected bytes; a
// message beyond the budget stays with the sender, its request pending,
// until the receiver posts receives (as TCP's flow control holds a sender
// back), and the messages behind it wait in order.
type InMemory struct {
	rank  int
	peers []*InMemory
	m     *Matcher
	out   []outQueue // out[p]: messages to rank p waiting for its budget

	ctx    context.Context // ends when this rank closes or aborts
	cancel context.CancelFunc

	sent, recvd, msgsSent, msgsRecvd atomic.Uint64

	closed atomic.Bool
	caps   Capabilities // Caps, made once (see Capabilities)

	mu     sync.Mutex
	err    error
	failed chan struct{}             // closed when err is set
	onLost func(peer int, err error) // set by Survive: the per-peer model
	lost   map[int]bool
}

// outQueue holds the messages to one peer that its budget has not taken
// yet, in the order they were sent; a goroutine delivers them while the
// queue is not empty.
type outQueue struct {
	mu      sync.Mutex
	items   []outMsg
	running bool // the delivering goroutine runs
}

type outMsg struct {
	tag  Tag
	desc Desc
	bufs [][]byte
	n    int
	req  *Request
}

// DefaultInMemoryLimit is NewInMemory's per-peer budget of unexpected
// bytes, the TCP transport's default.
const DefaultInMemoryLimit = 64 << 20

// NewInMemory returns size connected in-memory transports, one per rank,
// each with a per-peer budget of DefaultInMemoryLimit unexpected bytes.
func NewInMemory(size int) []*InMemory { return NewInMemoryLimit(size, DefaultInMemoryLimit) }

// NewInMemoryLimit is NewInMemory with a per-peer budget of limit bytes of
// unexpected messages (0: unlimited).
func NewInMemoryLimit(size int, limit int64) []*InMemory {
	ts := make([]*InMemory, size)
	for r := range ts {
		ctx, cancel := context.WithCancel(context.Background())
		ts[r] = &InMemory{rank: r, m: NewMatcher(r, limit), out: make([]outQueue, size), ctx: ctx, cancel: cancel,
			failed: make(chan struct{})}
	}
	for _, t := range ts {
		t.peers = ts
		t.caps = Capabilities{Failed: t.failed, FailLocal: t.FailLocal, FailOpLocal: t.FailOpLocal, Survive: t.Survive}
	}
	return ts
}

// AsTransports returns the in-memory transports as the interface type.
func AsTransports(ts []*InMemory) []Transport {
	out := make([]Transport, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func (t *InMemory) Name() string { return "inmem" }
func (t *InMemory) Rank() int    { return t.rank }
func (t *InMemory) Size() int    { return len(t.peers) }

func (t *InMemory) checkPeer(peer int) error {
	if peer < 0 || peer >= len(t.peers) || peer == t.rank {
		return errorf(ErrInvalid, "rank %d: peer %d out of range [0,%d) or self", t.rank, peer, len(t.peers))
	}
	return nil
}

// Send implements Transport.
func (t *InMemory) Send(peer int, tag Tag, desc Desc, bufs ...[]byte) *Request {
	if err := t.checkPeer(peer); err != nil {
		return Failed(peer, tag, true, err)
	}
	if err := t.Err(); err != nil {
		return Failed(peer, tag, true, err)
	}
	msg := outMsg{tag: tag, desc: desc, bufs: bufs}
	for _, b := range bufs {
		msg.n += len(b)
	}
	q := &t.out[peer]
	q.mu.Lock()
	if !q.running {
		c, err := t.peers[peer].m.TryClaim(t.rank, tag, desc, msg.n)
		if err == nil {
			q.mu.Unlock()
			t.deliver(peer, c, msg)
			return Failed(peer, tag, true, nil)
		}
		if !errors.Is(err, ErrNoBudget) {
			q.mu.Unlock()
			return Failed(peer, tag, true, t.sendError(peer, err))
		}
		q.running = true
		go t.drain(peer)
	}
	msg.req = NewRequest(peer, tag, true)
	q.items = append(q.items, msg)
	q.mu.Unlock()
	return msg.req
}

// drain delivers the queued messages to peer, in order, each once the
// peer's budget takes it, until the queue is empty.
func (t *InMemory) drain(peer int) {
	q := &t.out[peer]
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		msg := q.items[0]
		q.mu.Unlock()
		c, err := t.peers[peer].m.ClaimContext(t.ctx, t.rank, msg.tag, msg.desc, msg.n)
		q.mu.Lock()
		q.items[0] = outMsg{}
		q.items = q.items[1:]
		q.mu.Unlock()
		if err != nil {
			if t.ctx.Err() != nil {
				err = t.Err()
			} else {
				err = t.sendError(peer, err)
			}
			msg.req.Complete(nil, err)
			continue
		}
		t.deliver(peer, c, msg)
		msg.req.Complete(nil, nil)
	}
}

// deliver copies msg into the destination the peer's matcher chose.
func (t *InMemory) deliver(peer int, c Claimed, msg outMsg) {
	if dst := c.Dst(); dst != nil {
		off := 0
		for _, b := range msg.bufs {
			off += copy(dst[off:], b)
		}
	}
	t.sent.Add(uint64(msg.n))
	t.msgsSent.Add(1)
	t.peers[peer].recvd.Add(uint64(msg.n))
	t.peers[peer].msgsRecvd.Add(1)
	c.Finish()
}

// sendError is the error of a send the peer's matcher refused: the peer
// has failed or closed, and for the sender it is a lost peer.
func (t *InMemory) sendError(peer int, err error) error {
	var pe *PeerError
	if errors.As(err, &pe) {
		return err // the peer lost a rank (possibly this one)
	}
	if errors.Is(err, ErrClosed) {
		err = fmt.Errorf("rank %d closed its transport", peer)
	}
	return &PeerError{Peer: peer, Kind: ErrPeerLost, Err: err}
}

// Recv implements Transport.
func (t *InMemory) Recv(peer int, tag Tag, desc Desc, buf []byte) *Request {
	if err := t.checkPeer(peer); err != nil {
		return Failed(peer, tag, false, err)
	}
	return t.m.Post(peer, tag, desc, buf)
}

// FailOp implements Transport.
func (t *InMemory) FailOp(comm uint32, seq uint64, err error) {
	t.m.FailOp(comm, seq, err)
	remote := FailureOf(t.rank, err)
	for _, p := range t.peers {
		if p != t {
			p.m.FailOp(comm, seq, remote)
		}
	}
}

// Abort implements Transport: this rank fails and every peer sees it lost,
// as if its process had died.
func (t *InMemory) Abort(err error) {
	if !t.setErr(fmt.Errorf("%w: %w", ErrAborted, err)) {
		return
	}
	err = t.Err()
	t.cancel()
	t.m.Abort(err)
	lost := &PeerError{Peer: t.rank, Kind: ErrPeerLost, Err: err}
	for _, p := range t.peers {
		if p != t {
			p.peerLost(lost)
		}
	}
}

func (t *InMemory) peerLost(lost *PeerError) {
	if t.survivePeer(lost) {
		return
	}
	t.setErr(lost)
	t.m.Abort(t.Err())
}

// setErr records the sticky error and reports whether it was the first.
func (t *InMemory) setErr(err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false
	}
	t.err = err
	close(t.failed)
	return true
}

// Caps implements Transport: the in-memory transport can be watched,
// failed on this rank alone, per operation or whole, and can survive a
// lost peer; it has no segment size of its own.
func (t *InMemory) Caps() Capabilities { return t.caps }

// Failed is closed once the transport has failed (Capabilities.Failed).
func (t *InMemory) Failed() <-chan struct{} { return t.failed }

// FailLocal (Capabilities.FailLocal): everything pending and later fails
// with err on this rank only; the peers are not told (a Route spreads a
// loss seen by another of its transports this way, so the peers still
// learn of it from the rank that died, not from this one).
func (t *InMemory) FailLocal(err error) {
	if !t.setErr(err) {
		return
	}
	t.m.Abort(t.Err())
}

// Err implements Transport.
func (t *InMemory) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stats implements Transport.
func (t *InMemory) Stats() Stats {
	return Stats{BytesSent: t.sent.Load(), BytesRecv: t.recvd.Load(),
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecvd.Load()}
}

// Close implements Transport. The peers see a graceful close: what this
// rank sent before is still delivered, and only what still involves it
// fails there, naming it.
func (t *InMemory) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	reason := ""
	if err := t.Err(); err != nil {
		reason = ", after failing: " + err.Error()
	}
	t.setErr(ErrClosed)
	t.cancel()
	t.m.Abort(ErrClosed)
	bye := &PeerError{Peer: t.rank, Kind: ErrPeerLost, Err: fmt.Errorf("rank %d closed its transport%s", t.rank, reason)}
	for _, p := range t.peers {
		if p != t {
			p.m.FailPeer(t.rank, bye)
		}
	}
	return nil
}
