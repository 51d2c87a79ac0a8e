package rdma

import (
	"errors"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// takeCredits counts the credits piggybacked on the message in a ring
// slot and clears them there, so that a slot read again after it was
// parked does not count them twice.
func (t *Transport) takeCredits(p *peer, slot int) {
	b := p.ring(slot)
	if len(b) < hdrSize {
		return // onEager reports it
	}
	n := le.Uint16(b[2:])
	if n == 0 {
		return
	}
	le.PutUint16(b[2:], 0)
	p.mu.Lock()
	p.credits += int(n)
	p.mu.Unlock()
}

// onEager handles the message in a ring slot, then frees the slot. It
// reports false, having done nothing, when the message is data that must
// wait for the unexpected budget (see park).
func (t *Transport) onEager(p *peer, slot int) bool {
	b := p.ring(slot)
	var h header
	if err := h.decode(b); err != nil {
		t.protocolError(p.rank, err)
		return true
	}
	if int(h.Len) > len(b)-hdrSize {
		t.protocolError(p.rank, fmt.Errorf("%w: eager message of %d bytes in a %d-byte slot",
			transport.ErrProtocol, h.Len, len(b)))
		return true
	}
	payload := b[hdrSize : hdrSize+int(h.Len)]
	if h.Kind == kindData && !t.deliverEager(p, h, payload) {
		return false
	}
	switch h.Kind {
	case kindRTS:
		t.onRTS(p, h)
	case kindCTS:
		t.onCTS(p, h)
	case kindFailOp:
		f, err := transport.DecodeFailure(payload, t.size)
		if err != nil {
			t.protocolError(p.rank, fmt.Errorf("failop message: %w", err))
			return true
		}
		t.failOp(h.Tag.Comm, h.Tag.Seq, f)
	case kindBye:
		if h.Flags&byeAborted != 0 {
			t.peerLost(p.rank, errors.New(string(payload)))
		} else {
			t.peerClosed(p, string(payload))
		}
	case kindAdv:
		t.onAdv(p, h)
	case kindNack:
		t.onNack(p, h)
	case kindCancel, kindRevoke:
		t.onWithdraw(p, h)
	case kindRevoked:
		t.onRevoked(p, h)
	}
	p.mu.Lock()
	p.freed++
	p.mu.Unlock()
	return true
}

// deliverEager hands an eager message to its receive: into the buffer on
// offer for it, into the posted receive, or as an unexpected message. It
// reports false, having done nothing, when the unexpected budget for the
// peer is spent.
func (t *Transport) deliverEager(p *peer, h header, payload []byte) bool {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if rr := t.adverts[k]; rr != nil {
		t.endAdvertLocked(rr)
		t.mu.Unlock()
		t.eagerIntoAdvert(p, rr, h, payload)
		return true
	}
	c, err := t.m.TryClaim(p.rank, h.Tag, h.Desc, len(payload))
	if errors.Is(err, transport.ErrNoBudget) {
		t.mu.Unlock()
		return false
	}
	delete(t.posted, k)
	var revokes []revoke
	switch {
	case err != nil:
	case c.KindMismatch():
		revokes = t.kindMismatchLocked(p.rank, h.Tag, h.Desc)
	default:
		copy(c.Dst(), payload)
		t.recvd.Add(uint64(len(payload)))
		t.msgsRecvd.Add(1)
		c.Finish()
	}
	t.mu.Unlock()
	t.sendRevokes(revokes)
	if errors.Is(err, transport.ErrProtocol) {
		t.protocolError(p.rank, err)
	}
	return true
}

// park keeps a ring slot whose message waits for the unexpected budget;
// the slots that arrive after it from the same peer wait behind it, so
// that the peer's messages are handled in order. Called with pollMu held.
func (t *Transport) park(p *peer, slot int) {
	if len(p.parked) == 0 {
		t.parkedPeers.Add(1)
	}
	p.parked = append(p.parked, slot)
}

// unparkLocked handles the parked slots that the budget now takes, in
// order, and returns their credits. Called with pollMu held.
func (t *Transport) unparkLocked() {
	if t.parkedPeers.Load() == 0 {
		return
	}
	for _, p := range t.peers {
		if p == nil || len(p.parked) == 0 {
			continue
		}
		n := 0
		for n < len(p.parked) && t.onEager(p, p.parked[n]) {
			n++
		}
		if n == 0 {
			continue
		}
		p.parked = p.parked[:copy(p.parked, p.parked[n:])]
		if len(p.parked) == 0 {
			t.parkedPeers.Add(-1)
		}
		p.drain()
	}
}

// unpark retries the parked slots from outside the progress loop, after
// a receive was posted or an operation failed (either may make room).
func (t *Transport) unpark() {
	if t.parkedPeers.Load() == 0 {
		return
	}
	t.pollMu.Lock()
	if !t.stop.Load() {
		t.unparkLocked()
	}
	t.pollMu.Unlock()
}
