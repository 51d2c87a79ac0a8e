package rdma

import (
	"fmt"
	"unsafe"

	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// rndvSend is a large send from RTS until its last write completes.
type rndvSend struct {
	req     *transport.Request
	peer    int
	desc    transport.Desc
	bufs    [][]byte
	n       int
	handles []memreg.Handle[*verbs.MR]
	wrs     []verbs.SendWR
}

// rndvRecv is a claimed large receive waiting for its data. The caller's
// buffer is registered through the cache (it is likely to be used again);
// a buffer the matcher allocated because the caller's was too small gets
// a registration of its own, dropped on completion.
type rndvRecv struct {
	peer   int
	n      int
	done   func()
	fail   func(error) // fails the receive instead (the sender closed)
	handle memreg.Handle[*verbs.MR]
	own    *verbs.MR
	adv    *advert // set while the buffer is on offer (kindAdv)
}

func (rr *rndvRecv) release() {
	if rr.own != nil {
		rr.own.Close()
		return
	}
	rr.handle.Release()
}

// claimLocked claims the posted receive for an RTS, registers its buffer
// and returns the CTS to send. An error is fatal for the transport.
func (t *Transport) claimLocked(peer int, rts header, posted []byte) (header, error) {
	cts := header{Kind: kindCTS, Tag: rts.Tag, ID: rts.ID, Flags: ctsDiscard}
	c, err := t.m.Claim(peer, rts.Tag, rts.Desc, int(rts.Size))
	dst := c.Dst()
	if err != nil || dst == nil {
		return cts, nil // failed operation, mismatch or failed transport: drop
	}
	rr := &rndvRecv{peer: peer, n: len(dst), done: c.Finish, fail: c.Fail}
	var rkey uint32
	if cap(posted) > 0 && unsafe.SliceData(posted) == unsafe.SliceData(dst) {
		rr.handle, err = t.cache.Acquire(dst)
		if err == nil {
			rkey = rr.handle.Region().RKey()
		}
	} else {
		rr.own, err = t.pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err == nil {
			rkey = rr.own.RKey()
		}
	}
	if err != nil {
		return cts, fmt.Errorf("rdma: registering a %d-byte receive buffer from rank %d: %w", len(dst), peer, err)
	}
	id := t.newRecvIDLocked()
	t.recvs[id] = rr
	cts.ID2, cts.Size, cts.RKey, cts.Flags = id, addrOf(dst), rkey, 0
	return cts, nil
}

func (t *Transport) newRecvIDLocked() uint32 {
	t.nextRecv = (t.nextRecv + 1) & immMask
	if t.nextRecv == 0 {
		t.nextRecv = 1
	}
	return t.nextRecv
}

func (t *Transport) onRTS(p *peer, h header) {
	k := mkey{p.rank, h.Tag}
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	if rr := t.adverts[k]; rr != nil {
		// The RTS crossed our offer: the sender takes the offer when it
		// arrives, or refuses it with a nack, which resolves this RTS.
		if !rr.adv.nacked {
			rr.adv.rts = &h
			t.mu.Unlock()
			return
		}
		t.endAdvertLocked(rr)
		t.mu.Unlock()
		t.advertToRTS(p, rr, h)
		return
	}
	if _, failed := t.failed[opKey{h.Tag.Comm, h.Tag.Seq}]; failed {
		t.mu.Unlock()
		t.enqueue(p, &outMsg{hdr: header{Kind: kindCTS, Tag: h.Tag, ID: h.ID, Flags: ctsDiscard}})
		return
	}
	if t.m.CheckKind(p.rank, h.Tag, h.Desc) {
		// Another collective's message: its operation has failed here.
		revokes := t.kindMismatchLocked(p.rank, h.Tag, h.Desc)
		delete(t.posted, k)
		t.mu.Unlock()
		t.sendRevokes(revokes)
		t.enqueue(p, &outMsg{hdr: header{Kind: kindCTS, Tag: h.Tag, ID: h.ID, Flags: ctsDiscard}})
		return
	}
	pr, ok := t.posted[k]
	if !ok {
		if _, dup := t.pendingRTS[k]; dup {
			t.mu.Unlock()
			t.protocolError(p.rank, fmt.Errorf("%w: rank %d sent two messages with %v", transport.ErrProtocol, p.rank, h.Tag))
			return
		}
		t.pendingRTS[k] = h // answered when the receive is posted
		t.mu.Unlock()
		return
	}
	delete(t.posted, k)
	cts, err := t.claimLocked(p.rank, h, pr.buf)
	t.mu.Unlock()
	t.enqueue(p, &outMsg{hdr: cts})
	if err != nil {
		t.fail(err)
	}
}

// onCTS writes a rendezvous payload into the buffer the receiver gave.
func (t *Transport) onCTS(p *peer, h header) {
	t.mu.Lock()
	rs := t.sends[h.ID]
	if rs != nil && h.Flags&ctsDiscard != 0 {
		delete(t.sends, h.ID)
	}
	if k := (mkey{p.rank, h.Tag}); t.sendTags[k] == h.ID {
		delete(t.sendTags, k)
	}
	t.mu.Unlock()
	if rs == nil || rs.peer != p.rank {
		if t.Err() == nil {
			t.protocolError(p.rank, fmt.Errorf("%w: clear-to-send for unknown send %d", transport.ErrProtocol, h.ID))
		}
		return
	}
	if h.Flags&ctsDiscard != 0 {
		// The receiver dropped the message (its operation failed or the
		// descriptors differ): the send is over, as on TCP.
		rs.req.Complete(nil, nil)
		return
	}
	if err := t.buildWrites(p, rs, h); err != nil {
		t.fail(err)
		return
	}
	t.enqueue(p, &outMsg{rndv: rs})
}

// buildWrites registers the send buffers and turns them into RDMA write
// requests, each of up to maxSendSGE buffers and maxWrite bytes, laid end
// to end in the receiver's buffer; the last one carries the immediate.
func (t *Transport) buildWrites(p *peer, rs *rndvSend, cts header) error {
	maxSGE := p.qp.Caps().MaxSendSGE
	remote := cts.Size
	var wrs []verbs.SendWR
	// Every request names the send, not only the signalled last one: a
	// request that fails completes (in error) signalled or not, and its
	// completion must name the right peer and operation.
	wrid := makeWRID(wrRndv, p.rank, cts.ID)
	cur := verbs.SendWR{ID: wrid, Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
	curLen := 0
	flush := func() {
		wrs = append(wrs, cur)
		remote += uint64(curLen)
		cur = verbs.SendWR{ID: wrid, Opcode: verbs.OpRDMAWrite, RemoteAddr: remote, RKey: cts.RKey}
		curLen = 0
	}
	for _, b := range rs.bufs {
		if len(b) == 0 {
			continue
		}
		h, err := t.cache.Acquire(b)
		if err != nil {
			return fmt.Errorf("rdma: registering a %d-byte send buffer for rank %d: %w", len(b), p.rank, err)
		}
		rs.handles = append(rs.handles, h)
		lkey := h.Region().LKey()
		for len(b) > 0 {
			take := min(len(b), maxWrite-curLen)
			cur.SGEs = append(cur.SGEs, verbs.SGE{Addr: addrOf(b), Length: uint32(take), LKey: lkey})
			curLen += take
			b = b[take:]
			if curLen == maxWrite || len(cur.SGEs) == maxSGE {
				flush()
			}
		}
	}
	if curLen > 0 {
		flush()
	}
	if len(wrs) >= p.qp.Caps().MaxSendWR {
		return fmt.Errorf("%w: a send of %d buffers needs %d work requests, the queue holds %d",
			transport.ErrInvalid, len(rs.bufs), len(wrs), p.qp.Caps().MaxSendWR)
	}
	last := &wrs[len(wrs)-1]
	last.Opcode = verbs.OpRDMAWriteWithImm
	last.Imm = makeImm(immDone, cts.ID2)
	last.Signaled = true
	rs.wrs = wrs
	return nil
}

// onRndvDone: the last write of a rendezvous send completed.
func (t *Transport) onRndvDone(p *peer, id uint32) {
	t.mu.Lock()
	rs := t.sends[id]
	delete(t.sends, id)
	t.mu.Unlock()
	if rs == nil {
		return // failed meanwhile
	}
	p.completed(len(rs.wrs), false)
	for _, h := range rs.handles {
		h.Release()
	}
	t.sent.Add(uint64(rs.n))
	t.msgsSent.Add(1)
	rs.req.Complete(nil, nil)
}

// onDone: a rendezvous payload has landed in the claimed buffer.
func (t *Transport) onDone(p *peer, id uint32) {
	t.mu.Lock()
	rr := t.recvs[id]
	delete(t.recvs, id)
	if rr != nil && rr.adv != nil && rr.peer == p.rank {
		delete(t.adverts, mkey{rr.peer, rr.adv.tag})
	}
	t.mu.Unlock()
	if rr == nil || rr.peer != p.rank {
		if t.Err() == nil {
			t.protocolError(p.rank, fmt.Errorf("%w: rendezvous completion for unknown receive %d", transport.ErrProtocol, id))
		}
		return
	}
	rr.release()
	t.recvd.Add(uint64(rr.n))
	t.msgsRecvd.Add(1)
	rr.done()
}
