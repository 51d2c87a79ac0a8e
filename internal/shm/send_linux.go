//go:build linux

package shm

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// outItem is one frame to a peer, written into its ring in order with the
// others: at once by Send when the ring has room and nothing waits before
// it, otherwise, as the peer makes room, by whoever polls.
type outItem struct {
	h    wire.Header
	bufs [][]byte           // the body: payload, or reason text
	req  *transport.Request // data: completes once written; rendezvous: once read
	hdr  [hdrSize]byte

	started bool   // the header is encoded (and, for a rendezvous, a slot taken)
	off     uint64 // bytes of the frame written: header, body, padding
	buf     int    // body cursor: bufs[buf][bufOff:] comes next
	bufOff  int
}

// rndvSend is a single-copy send from the rendezvous frame until its
// receiver has read it (or dropped it).
type rndvSend struct {
	req  *transport.Request
	n    uint64
	bufs [][]byte // kept referenced, so that they stay where the peer reads them
}

// send writes it to the peer's ring, or queues it behind what waits.
func (p *peer) send(it *outItem) {
	p.sendMu.Lock()
	if err := p.sendErr; err != nil {
		p.sendMu.Unlock()
		if it.req != nil {
			it.req.Complete(nil, err)
		}
		return
	}
	if len(p.queue) == 0 && !p.peerClosing() && p.putLocked(it) {
		p.flushLocked()
		p.sendMu.Unlock()
		p.written(it)
		return
	}
	p.queue = append(p.queue, it)
	p.queued.Store(true)
	p.drainLocked() // room may have come meanwhile, and wantSpace is set
	p.sendMu.Unlock()
}

// peerClosing reports whether the peer has begun to close: it reads its
// ring no more, and its goodbye (or its death) follows, saying why.
// Frames for it then stay queued until that ends them (failSends), so
// that they fail with the peer's reason, not with a bare "closed" that
// hides the rank whose loss made it close.
func (p *peer) peerClosing() bool {
	return atomic.LoadUint32(p.remoteClose) != 0
}

// written finishes a frame that is entirely in the ring.
func (p *peer) written(it *outItem) {
	if it.h.Kind == wire.Data {
		p.t.sent.Add(it.h.Length)
		p.t.msgsSent.Add(1)
		it.req.Complete(nil, nil)
	}
}

// drainLocked writes queued frames while there is room, in order, and
// asks the peer for a wake-up (wantSpace) when room runs out. Returns
// whether anything was written.
func (p *peer) drainLocked() bool {
	if p.peerClosing() {
		return false
	}
	var done []*outItem
	for len(p.queue) > 0 {
		it := p.queue[0]
		if !p.putLocked(it) {
			if it.h.Kind == wire.Rendezvous && !it.started && p.out.room() >= hdrSize {
				break // no free slot: a finished single-copy send will wake this rank
			}
			// Room ran out: ask to be woken when the reader frees some,
			// then look once more, since it may have freed it before it
			// saw the request.
			atomic.StoreUint32(p.out.wantSpace, 1)
			if !p.putLocked(it) {
				break
			}
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
		done = append(done, it)
	}
	p.queued.Store(len(p.queue) > 0)
	wrote := p.flushLocked()
	for _, it := range done {
		p.written(it)
	}
	return wrote
}

// flushLocked publishes what was written and wakes the peer.
func (p *peer) flushLocked() bool {
	if !p.out.publish() {
		return false
	}
	ring(p.remoteSeq, p.remoteAwake)
	return true
}

// putLocked writes as much of it as the ring has room for and reports
// whether the whole frame is in.
func (p *peer) putLocked(it *outItem) bool {
	if !it.started {
		if p.out.room() < hdrSize {
			return false
		}
		if it.h.Kind == wire.Rendezvous && !p.offerLocked(it) {
			return false
		}
		wire.EncodeRingHeader(it.hdr[:], &it.h)
		it.started = true
	}
	r := &p.out
	body := bodySize(&it.h)
	total := hdrSize + padded(body)
	for it.off < total {
		room := r.room()
		if room == 0 {
			return false
		}
		switch {
		case it.off < hdrSize:
			// The header starts on a 64-byte boundary and goes in
			// whole, so the reader never sees half of one.
			if room < hdrSize {
				return false
			}
			r.put(it.hdr[:])
			it.off = hdrSize
		case it.off < hdrSize+body:
			n := min(room, hdrSize+body-it.off)
			it.putBody(r, n)
			it.off += n
		default:
			n := min(room, total-it.off)
			r.skip(n)
			it.off += n
		}
	}
	return true
}

// putBody copies the next n body bytes from the item's buffers.
func (it *outItem) putBody(r *outRing, n uint64) {
	for n > 0 {
		b := it.bufs[it.buf][it.bufOff:]
		if len(b) == 0 {
			it.buf, it.bufOff = it.buf+1, 0
			continue
		}
		k := min(uint64(len(b)), n)
		r.put(b[:k])
		it.bufOff += int(k)
		n -= k
	}
}

// offerLocked takes a free slot for a single-copy send, offers the
// caller's buffers in it and makes the frame's body the list of them.
// It reports false when every slot is in use.
func (p *peer) offerLocked(it *outItem) bool {
	slot := -1
	for i, s := range p.slots {
		if s == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		return false
	}
	var list []remoteBuf
	for _, b := range it.bufs {
		if len(b) > 0 {
			list = append(list, remoteBuf{addrOf(b), uint64(len(b))})
		}
	}
	gen := (p.gens[slot] + 1) & (1<<genBits - 1)
	p.gens[slot] = gen
	p.slots[slot] = &rndvSend{req: it.req, n: it.h.Length, bufs: it.bufs}
	p.inFlight.Add(1)
	atomic.StoreUint32(p.mySlot(slot), slotWord(gen, slotOffered))
	body := make([]byte, len(list)*iovSize)
	encodeIovs(body, list)
	it.h.Slot, it.h.Gen, it.h.Iovs = uint32(slot), gen, uint16(len(list))
	it.bufs = [][]byte{body}
	return true
}

func (p *peer) mySlot(i int) *uint32 { return word32(p.mySlots, 4*i) }

// reapLocked completes the single-copy sends whose receiver has read (or
// dropped) them. Returns whether any did.
func (p *peer) reapLocked() bool {
	reaped := false
	for i, s := range p.slots {
		if s == nil || atomic.LoadUint32(p.mySlot(i)) != slotWord(p.gens[i], slotDone) {
			continue
		}
		p.freeSlotLocked(i)
		p.t.sent.Add(s.n)
		p.t.msgsSent.Add(1)
		s.req.Complete(nil, nil)
		reaped = true
	}
	return reaped
}

func (p *peer) freeSlotLocked(i int) {
	atomic.StoreUint32(p.mySlot(i), slotWord(p.gens[i], slotIdle))
	p.slots[i] = nil
	p.inFlight.Add(-1)
}

// serviceSends reaps finished single-copy sends and writes queued frames.
// Called by pollers.
func (p *peer) serviceSends() bool {
	if p.inFlight.Load() == 0 && !p.queued.Load() {
		return false
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.sendErr != nil {
		return false
	}
	worked := p.reapLocked()
	if len(p.queue) > 0 && p.drainLocked() {
		worked = true
	}
	return worked
}

// failSends makes every later send to the peer fail with err and ends
// the pending ones: queued frames fail, a frame cut short marks the ring
// as unusable for a goodbye, and offered single-copy sends are withdrawn
// (they fail) unless the peer is reading them, in which case they complete
// once it has (waiting for at most wire.CloseTimeout; not for a peer that is
// gone, which reads nothing more).
func (p *peer) failSends(err error, peerGone bool) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.sendErr == nil {
		p.sendErr = err
	}
	p.failQueueLocked(err)
	p.withdrawLocked(err, peerGone)
}

func (p *peer) failQueueLocked(err error) {
	for i, it := range p.queue {
		p.queue[i] = nil
		if it.started {
			p.outCut = true // the frame is half in the ring
		}
		if it.req == nil || it.h.Kind == wire.Rendezvous && it.started {
			continue // a control frame; or its slot holds it (withdrawLocked)
		}
		it.req.Complete(nil, err)
	}
	p.queue = p.queue[:0]
	p.queued.Store(false)
}

func (p *peer) withdrawLocked(err error, peerGone bool) {
	deadline := time.Now().Add(wire.CloseTimeout)
	for i, s := range p.slots {
		if s == nil {
			continue
		}
		w := p.mySlot(i)
		gen := p.gens[i]
		if atomic.CompareAndSwapUint32(w, slotWord(gen, slotOffered), slotWord(gen, slotIdle)) {
			p.freeSlotLocked(i)
			s.req.Complete(nil, err)
			continue
		}
		for !peerGone && atomic.LoadUint32(w) == slotWord(gen, slotPulling) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Microsecond)
			runtime.Gosched()
		}
		read := atomic.LoadUint32(w) == slotWord(gen, slotDone)
		p.freeSlotLocked(i)
		if read {
			p.t.sent.Add(s.n)
			p.t.msgsSent.Add(1)
			s.req.Complete(nil, nil)
		} else {
			s.req.Complete(nil, err)
		}
	}
}
