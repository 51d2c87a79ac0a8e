package rdma

import (
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// advert is a receive whose buffer was offered to the sender before its
// RTS arrived. The receive is claimed from the matcher at once, so nothing
// completes it behind the transport's back: it ends only when the payload
// has landed, when it came eagerly instead, or once the sender has said it
// will not write (kindNack, kindRevoked). Only then is the buffer given
// back to the caller.
type advert struct {
	id      uint32
	tag     transport.Tag
	desc    transport.Desc
	req     *transport.Request
	buf     []byte
	rts     *header // the sender's RTS, when it crossed the offer
	nacked  bool
	failErr error // the operation failed
	sent    bool  // the offer is queued to the sender
	revoked bool  // a revoke is queued after it
}

// advertiseLocked claims a posted receive before its RTS came, registers
// its buffer and returns the offer to send. When the matcher does not hand
// the receive over (its operation failed, or a collective mismatch failed
// it), the receive stays posted and nothing is offered.
func (t *Transport) advertiseLocked(peer int, tag transport.Tag, desc transport.Desc, req *transport.Request, buf []byte) (*header, error) {
	k := mkey{peer, tag}
	c, err := t.m.Claim(peer, tag, desc, len(buf))
	dst := c.Dst()
	if err != nil || dst == nil {
		t.posted[k] = postedRecv{req, buf}
		return nil, nil
	}
	rr := &rndvRecv{peer: peer, n: len(dst), done: c.Finish, fail: c.Fail}
	rr.handle, err = t.cache.Acquire(dst)
	if err != nil {
		return nil, fmt.Errorf("rdma: registering a %d-byte receive buffer for rank %d: %w", len(dst), peer, err)
	}
	id := t.newRecvIDLocked()
	rr.adv = &advert{id: id, tag: tag, desc: desc, req: req, buf: dst}
	t.recvs[id] = rr
	t.adverts[k] = rr
	return &header{Kind: kindAdv, Tag: tag, Desc: desc, Size: addrOf(dst), ID: uint32(len(dst)), ID2: id,
		RKey: rr.handle.Region().RKey()}, nil
}

// sendAdvert queues an offer. A revoke must follow its offer on the wire,
// so an operation that failed while the offer was being queued is revoked
// here rather than by failOp.
func (t *Transport) sendAdvert(peer int, adv *header) {
	p := t.peers[peer]
	t.enqueue(p, &outMsg{hdr: *adv})
	t.mu.Lock()
	rr := t.recvs[adv.ID2]
	revoke := false
	if rr != nil && rr.adv != nil {
		rr.adv.sent = true
		revoke = rr.adv.failErr != nil && !rr.adv.revoked
		rr.adv.revoked = rr.adv.revoked || revoke
	}
	t.mu.Unlock()
	if revoke {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindRevoke, Tag: adv.Tag, ID2: adv.ID2}})
	}
}

// onAdv: a receiver offers its buffer for tag. A send waiting for its CTS
// takes it now; a later Send finds it in advs.
func (t *Transport) onAdv(p *peer, h header) {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	id, waiting := t.sendTags[k]
	var rs *rndvSend
	if waiting {
		delete(t.sendTags, k)
		rs = t.sends[id]
	}
	if rs == nil {
		if _, dup := t.advs[k]; dup {
			t.mu.Unlock()
			t.protocolError(p.rank, fmt.Errorf("%w: rank %d offered two buffers for %v", transport.ErrProtocol, p.rank, h.Tag))
			return
		}
		t.advs[k] = h
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.useAdvert(p, rs, id, h)
}

// useAdvert writes send id straight into an offered buffer when the sizes
// and descriptors agree (the receiver then learns both from the offer it
// made), and otherwise refuses the offer. It reports whether it wrote.
func (t *Transport) useAdvert(p *peer, rs *rndvSend, id uint32, adv header) bool {
	if uint64(rs.n) != uint64(adv.ID) || rs.desc != adv.Desc {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindNack, Tag: adv.Tag, ID2: adv.ID2}})
		return false
	}
	cts := header{Kind: kindCTS, Tag: adv.Tag, ID: id, ID2: adv.ID2, Size: adv.Size, RKey: adv.RKey}
	if err := t.buildWrites(p, rs, cts); err != nil {
		t.fail(err)
		return true
	}
	t.enqueue(p, &outMsg{rndv: rs})
	return true
}

// onNack: the sender refused our offer; its RTS (before or after the nack)
// goes the ordinary way.
func (t *Transport) onNack(p *peer, h header) {
	t.mu.Lock()
	rr := t.recvs[h.ID2]
	if rr == nil || rr.adv == nil || rr.peer != p.rank {
		t.mu.Unlock()
		return
	}
	if rr.adv.rts == nil {
		rr.adv.nacked = true
		t.mu.Unlock()
		return
	}
	t.endAdvertLocked(rr)
	t.mu.Unlock()
	t.advertToRTS(p, rr, *rr.adv.rts)
}

// onWithdraw: the receiver withdraws its offer for h.Tag (kindCancel: an
// eager message overtook it) or asks it back (kindRevoke: its operation
// failed). An offer not used yet is forgotten, and a revoke confirmed.
func (t *Transport) onWithdraw(p *peer, h header) {
	t.mu.Lock()
	k := mkey{p.rank, h.Tag}
	adv, ok := t.advs[k]
	if ok && adv.ID2 == h.ID2 {
		delete(t.advs, k)
	}
	t.mu.Unlock()
	if ok && adv.ID2 == h.ID2 && h.Kind == kindRevoke {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindRevoked, Tag: h.Tag, ID2: h.ID2}})
	}
	// Otherwise the offer was used or refused: the payload or a
	// nack is on its way and resolves the receive.
}

// onRevoked: the sender confirms it will not write into a revoked offer;
// the receive fails with its operation's error.
func (t *Transport) onRevoked(p *peer, h header) {
	t.mu.Lock()
	rr := t.recvs[h.ID2]
	if rr == nil || rr.adv == nil || rr.peer != p.rank {
		t.mu.Unlock()
		return
	}
	t.endAdvertLocked(rr)
	t.mu.Unlock()
	rr.adv.req.Complete(nil, rr.adv.failErr)
	rr.done()
}

// endAdvertLocked withdraws an offer the sender will not write into.
func (t *Transport) endAdvertLocked(rr *rndvRecv) {
	delete(t.recvs, rr.adv.id)
	delete(t.adverts, mkey{rr.peer, rr.adv.tag})
	rr.release()
}

// advertToRTS answers an RTS for a receive whose offer was refused, as
// claimLocked does for a posted one; the receive is already claimed, so
// it is completed here, not by the matcher.
func (t *Transport) advertToRTS(p *peer, rr *rndvRecv, rts header) {
	a := rr.adv
	cts := header{Kind: kindCTS, Tag: rts.Tag, ID: rts.ID, Flags: ctsDiscard}
	fail := func(err error) {
		a.req.Complete(nil, err)
		rr.done()
		t.enqueue(p, &outMsg{hdr: cts})
	}
	if a.failErr != nil {
		fail(a.failErr)
		return
	}
	if rts.Desc != a.desc {
		fail(&transport.MismatchError{Tag: rts.Tag, Local: a.desc, Peer: p.rank, Remote: rts.Desc, Rank: t.rank})
		return
	}
	dst := a.buf[:0]
	if cap(dst) < int(rts.Size) {
		dst = make([]byte, rts.Size)
	}
	dst = dst[:rts.Size]
	nr := &rndvRecv{peer: p.rank, n: len(dst), done: func() { a.req.Complete(dst, nil); rr.done() }}
	var err error
	var rkey uint32
	if unsafe.SliceData(dst) == unsafe.SliceData(a.buf) {
		nr.handle, err = t.cache.Acquire(dst)
		if err == nil {
			rkey = nr.handle.Region().RKey()
		}
	} else {
		nr.own, err = t.pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err == nil {
			rkey = nr.own.RKey()
		}
	}
	if err != nil {
		t.fail(fmt.Errorf("rdma: registering a %d-byte receive buffer from rank %d: %w", len(dst), p.rank, err))
		return
	}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		nr.release()
		return
	}
	id := t.newRecvIDLocked()
	t.recvs[id] = nr
	t.mu.Unlock()
	cts.ID2, cts.Size, cts.RKey, cts.Flags = id, addrOf(dst), rkey, 0
	t.enqueue(p, &outMsg{hdr: cts})
}

// eagerIntoAdvert delivers an eager message for a receive whose buffer was
// on offer (the sender had not seen the offer, or the message is small),
// and tells the sender to forget the offer.
func (t *Transport) eagerIntoAdvert(p *peer, rr *rndvRecv, h header, payload []byte) {
	a := rr.adv
	t.enqueue(p, &outMsg{hdr: header{Kind: kindCancel, Tag: h.Tag, ID2: a.id}})
	if h.Desc != a.desc {
		a.req.Complete(nil, &transport.MismatchError{Tag: h.Tag, Local: a.desc, Peer: p.rank, Remote: h.Desc, Rank: t.rank})
		rr.done()
		return
	}
	var data []byte
	if cap(a.buf) >= len(payload) {
		data = a.buf[:len(payload)]
	} else {
		data = make([]byte, len(payload))
	}
	copy(data, payload)
	t.recvd.Add(uint64(len(payload)))
	t.msgsRecvd.Add(1)
	a.req.Complete(data, nil)
	rr.done()
}

// revoke is an offer to ask back (kindRevoke) once t.mu is released.
type revoke struct {
	peer int
	hdr  header
}

// revokeAdvertsLocked marks the receives of operation (comm, seq) whose
// buffers are on offer to fail with errOf(their advert), and returns the
// revokes that ask the buffers back: a receive fails once its sender
// confirms it will not write (or completes if the payload lands first).
// Called with t.mu held.
func (t *Transport) revokeAdvertsLocked(comm uint32, seq uint64, errOf func(*advert) error) []revoke {
	var out []revoke
	for k, rr := range t.adverts {
		if k.tag.Comm == comm && k.tag.Seq == seq && rr.adv.failErr == nil {
			rr.adv.failErr = errOf(rr.adv)
			if rr.adv.sent {
				rr.adv.revoked = true
				out = append(out, revoke{k.peer, header{Kind: kindRevoke, Tag: k.tag, ID2: rr.adv.id}})
			}
		}
	}
	return out
}

func (t *Transport) sendRevokes(revokes []revoke) {
	for _, r := range revokes {
		t.enqueue(t.peers[r.peer], &outMsg{hdr: r.hdr})
	}
}
