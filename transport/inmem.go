package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// InMemory is a Transport between goroutines of one process. Collectives
// run over it unchanged, so they can be tested fast and under the race
// detector. A send copies the payload straight into the receiver's buffer
// when the receive is already posted.
type InMemory struct {
	rank  int
	peers []*InMemory
	m     *Matcher

	sent, recvd, msgsSent, msgsRecvd atomic.Uint64

	mu  sync.Mutex
	err error
}

// NewInMemory returns size connected in-memory transports, one per rank.
func NewInMemory(size int) []*InMemory {
	ts := make([]*InMemory, size)
	for r := range ts {
		ts[r] = &InMemory{rank: r, m: NewMatcher(r, 0)}
	}
	for _, t := range ts {
		t.peers = ts
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
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	c, err := t.peers[peer].m.Claim(t.rank, tag, desc, n)
	if err != nil {
		// The receiver is gone; for the sender that is a lost peer.
		return Failed(peer, tag, true, &PeerError{Peer: peer, Kind: ErrPeerLost, Err: err})
	}
	if dst := c.Dst(); dst != nil {
		off := 0
		for _, b := range bufs {
			off += copy(dst[off:], b)
		}
	}
	c.Finish()
	t.sent.Add(uint64(n))
	t.msgsSent.Add(1)
	t.peers[peer].recvd.Add(uint64(n))
	t.peers[peer].msgsRecvd.Add(1)
	return Failed(peer, tag, true, nil)
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
	remote := &RemoteFailure{Peer: t.rank, Reason: err.Error()}
	for _, p := range t.peers {
		if p != t {
			p.m.FailOp(comm, seq, remote)
		}
	}
}

// Abort implements Transport: this rank fails and every peer sees it lost,
// as if its process had died.
func (t *InMemory) Abort(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = fmt.Errorf("%w: %w", ErrAborted, err)
	}
	err = t.err
	t.mu.Unlock()
	t.m.Abort(err)
	for _, p := range t.peers {
		if p != t {
			p.peerLost(t.rank, err)
		}
	}
}

func (t *InMemory) peerLost(peer int, cause error) {
	lost := &PeerError{Peer: peer, Kind: ErrPeerLost, Err: cause}
	t.mu.Lock()
	if t.err == nil {
		t.err = lost
	}
	t.mu.Unlock()
	t.m.Abort(lost)
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

// Close implements Transport.
func (t *InMemory) Close() error {
	t.mu.Lock()
	if t.err == nil {
		t.err = ErrClosed
	}
	t.mu.Unlock()
	t.m.Abort(ErrClosed)
	return nil
}
