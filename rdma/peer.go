package rdma

import (
	"fmt"
	"sync"

	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// peer is the connection to one other rank: its queue pair and a buffer
// holding this rank's receive ring for the peer followed by the staging
// slots for eager sends to it, registered as one memory region.
type peer struct {
	t      *Transport
	rank   int
	qp     *verbs.QP
	buf    *memreg.Buffer
	mr     *verbs.MR
	psn    uint32
	slots  int
	remote connInfo

	// Send side, under mu.
	mu        sync.Mutex
	credits   int    // free slots in the peer's ring
	head      uint32 // next slot to write in the peer's ring
	sqFree    int    // free send queue entries
	queue     []*outMsg
	freed     int // slots of our ring consumed and not yet reported
	dead      error
	kaOut     bool // a keep-alive write is in flight
	wr        [1]verbs.SendWR
	sge       [1]verbs.SGE
	creditMin int

	// Receive side, under Transport.pollMu (the progress goroutine or a
	// polling waiter).
	recvToPost int
	touched    bool
	recvWRs    []verbs.RecvWR
	// parked are ring slots whose messages wait, in arrival order, for
	// the unexpected budget (Transport.park): the slots stay occupied,
	// so the peer runs out of credits and stops sending.
	parked []int

	// gone, under Transport.mu, is why the peer closed gracefully: only
	// what involves it fails, and nothing more is sent to it.
	gone error
}

// outMsg is a message waiting for credits or send queue space.
type outMsg struct {
	hdr  header
	bufs [][]byte           // eager payload
	req  *transport.Request // completed once posted (eager data)
	rndv *rndvSend          // a rendezvous payload to write
	bye  bool
}

func (t *Transport) newPeer(r int, caps verbs.QPCaps, ringBytes int) (*peer, error) {
	p := &peer{t: t, rank: r, slots: t.cfg.Slots, psn: randPSN(), credits: t.cfg.Slots,
		creditMin: max(1, t.cfg.Slots/4)}
	var err error
	if p.buf, err = memreg.Alloc(ringBytes, false); err != nil {
		return nil, err
	}
	if p.mr, err = t.pd.RegMR(p.buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		p.destroy()
		return nil, fmt.Errorf("rdma: registering the ring for rank %d: %w", r, err)
	}
	if p.qp, err = t.pd.CreateQP(t.ep.port, t.cq, t.cq, caps); err != nil {
		p.destroy()
		return nil, err
	}
	p.sqFree = p.qp.Caps().MaxSendWR
	if err := p.qp.ToInit(verbs.AccessLocalWrite | verbs.AccessRemoteWrite); err != nil {
		p.destroy()
		return nil, err
	}
	p.recvWRs = make([]verbs.RecvWR, p.qp.Caps().MaxChain)
	for i := range p.recvWRs {
		p.recvWRs[i].ID = makeWRID(wrRecv, r, 0)
	}
	p.recvToPost = p.qp.Caps().MaxRecvWR
	if err := p.postRecvs(); err != nil {
		p.destroy()
		return nil, err
	}
	return p, nil
}

// postRecvs reposts the receive work requests consumed so far. They have
// no SGE: every inbound message is an RDMA write with immediate (data
// lands in the ring or the destination buffer) or a zero-length send.
func (p *peer) postRecvs() error {
	for p.recvToPost > 0 {
		n := min(p.recvToPost, len(p.recvWRs))
		if _, err := p.qp.PostRecv(p.recvWRs[:n]); err != nil {
			return err
		}
		p.recvToPost -= n
	}
	return nil
}

func (p *peer) ring(slot int) []byte {
	s := p.t.slotSize
	return p.buf.Bytes()[slot*s : (slot+1)*s]
}

func (p *peer) staging(slot int) []byte {
	s := p.t.slotSize
	off := (p.slots + slot) * s
	return p.buf.Bytes()[off : off+s]
}

// enqueue queues m for p and posts whatever credits and send queue space
// allow.
func (t *Transport) enqueue(p *peer, m *outMsg) {
	p.mu.Lock()
	if p.dead != nil {
		err := p.dead
		p.mu.Unlock()
		if m.req != nil {
			m.req.Complete(nil, err)
		}
		if m.bye {
			t.byeDone()
		}
		return
	}
	p.queue = append(p.queue, m)
	err := p.drainLocked()
	p.mu.Unlock()
	if err != nil {
		t.peerLost(p.rank, err)
	}
}

// drain posts queued messages; called after credits or send queue space
// came back.
func (p *peer) drain() {
	p.mu.Lock()
	var err error
	if p.dead == nil {
		err = p.drainLocked()
	}
	p.mu.Unlock()
	if err != nil {
		p.t.peerLost(p.rank, err)
	}
}

func (p *peer) drainLocked() error {
	for len(p.queue) > 0 {
		m := p.queue[0]
		if m.rndv != nil {
			if p.sqFree < len(m.rndv.wrs) {
				break
			}
			if err := p.postRndvLocked(m.rndv); err != nil {
				return err
			}
		} else {
			// Keep one send queue entry for credit returns, so that two
			// ranks flooding each other still free each other's rings.
			if p.credits == 0 || p.sqFree < 2 {
				break
			}
			if err := p.postEagerLocked(m); err != nil {
				return err
			}
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	if p.freed >= p.creditMin && p.sqFree > 0 {
		return p.postCreditLocked()
	}
	return nil
}

// postEagerLocked copies m into the staging slot matching the next remote
// slot and writes it there with immediate.
func (p *peer) postEagerLocked(m *outMsg) error {
	slot := int(p.head % uint32(p.slots))
	st := p.staging(slot)
	n := 0
	for _, b := range m.bufs {
		n += copy(st[hdrSize+n:], b)
	}
	m.hdr.Len = uint32(n)
	m.hdr.Credits = uint16(p.freed)
	m.hdr.encode(st)
	id := uint32(0)
	if m.bye {
		id = 1
	}
	p.sge[0] = verbs.SGE{Addr: addrOf(st), Length: uint32(hdrSize + n), LKey: p.mr.LKey()}
	p.wr[0] = verbs.SendWR{ID: makeWRID(wrEager, p.rank, id), Opcode: verbs.OpRDMAWriteWithImm,
		SGEs: p.sge[:], Imm: makeImm(immEager, uint32(slot)),
		RemoteAddr: p.remote.RingAddr + uint64(slot*p.t.slotSize), RKey: p.remote.RingRKey,
		Signaled: true, Inline: hdrSize+n <= p.qp.Caps().MaxInline}
	if _, err := p.qp.PostSend(p.wr[:]); err != nil {
		return err
	}
	p.freed = 0
	p.credits--
	p.head++
	p.sqFree--
	if m.req != nil {
		p.t.sent.Add(uint64(n))
		p.t.msgsSent.Add(1)
		m.req.Complete(nil, nil)
	}
	return nil
}

// postCreditLocked returns freed ring slots with a zero-length send with
// immediate, which uses no slot of the peer's ring.
func (p *peer) postCreditLocked() error {
	p.wr[0] = verbs.SendWR{ID: makeWRID(wrCredit, p.rank, 0), Opcode: verbs.OpSendWithImm,
		Imm: makeImm(immCredit, uint32(p.freed)), Signaled: true}
	if _, err := p.qp.PostSend(p.wr[:]); err != nil {
		return err
	}
	p.freed = 0
	p.sqFree--
	return nil
}

// postKeepAlive writes zero bytes to the peer: a dead peer makes it fail
// with a retry error, which a rank that only receives would otherwise
// never see.
func (p *peer) postKeepAlive() {
	p.mu.Lock()
	if p.dead != nil || p.kaOut || p.sqFree < 2 {
		p.mu.Unlock()
		return
	}
	p.wr[0] = verbs.SendWR{ID: makeWRID(wrKeepalive, p.rank, 0), Opcode: verbs.OpRDMAWrite,
		RemoteAddr: p.remote.RingAddr, RKey: p.remote.RingRKey, Signaled: true}
	_, err := p.qp.PostSend(p.wr[:])
	if err == nil {
		p.kaOut = true
		p.sqFree--
	}
	p.mu.Unlock()
	if err != nil {
		p.t.peerLost(p.rank, err)
	}
}

// postRndvLocked posts the payload writes of a rendezvous send as chains;
// only the last request is signaled and carries the immediate.
func (p *peer) postRndvLocked(rs *rndvSend) error {
	max := p.qp.Caps().MaxChain
	for i := 0; i < len(rs.wrs); i += max {
		if _, err := p.qp.PostSend(rs.wrs[i:min(i+max, len(rs.wrs))]); err != nil {
			return err
		}
	}
	p.sqFree -= len(rs.wrs)
	return nil
}

// completed returns n send queue entries (and a keep-alive) and posts
// what waited for them.
func (p *peer) completed(n int, keepalive bool) {
	p.mu.Lock()
	p.sqFree += n
	if keepalive {
		p.kaOut = false
	}
	p.mu.Unlock()
}

// kill fails the peer's queued messages and moves its QP to the error
// state, which stops inbound writes and flushes outstanding requests.
func (p *peer) kill(err error) {
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		return
	}
	p.dead = err
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	if p.qp != nil {
		_ = p.qp.ToError()
	}
	for _, m := range q {
		if m.req != nil {
			m.req.Complete(nil, err)
		}
		if m.bye {
			p.t.byeDone()
		}
	}
}

// isDead reports whether kill has run: the queue pair is in the error
// state, and its failed completions are expected.
func (p *peer) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead != nil
}

func (p *peer) destroy() {
	if p.qp != nil {
		p.qp.Close()
	}
	if p.mr != nil {
		p.mr.Close()
	}
	if p.buf != nil {
		p.buf.Free()
	}
}

func (t *Transport) byeDone() {
	if t.byeOut.Add(-1) <= 0 {
		select {
		case t.byeCh <- struct{}{}:
		default:
		}
	}
}
