// Package rdma is the RDMA transport: one reliable-connected queue pair per
// peer (full mesh), set up through the bootstrap store, with two protocols.
//
// Eager (messages up to Config.EagerLimit): the payload is copied into a
// registered staging slot and written with RDMA write with immediate into
// the next slot of the peer's receive ring; the send completes at once.
// The receiver copies the slot out (into the posted buffer when the
// receive is already posted) and frees it. Senders hold one credit per
// free remote slot; credits come back piggybacked on every message and by
// explicit zero-length sends when traffic is one-way. A message whose
// receive is not posted is copied into a buffer of the matcher's, within
// a per-peer budget (Config.UnexpectedLimit); once that is spent, the
// slot, and the peer's slots behind it, stay occupied until receives are
// posted, so the peer runs out of credits and its sends wait.
//
// Rendezvous (larger messages, no copy): the sender announces the message
// (RTS). When the matching receive is posted, the receiver registers its
// destination buffer through the registration cache and answers with its
// address and rkey (CTS); the sender RDMA-writes the payload straight from
// the caller's buffers into it, and the last write carries an immediate
// that completes the receive. The receiver only exposes a buffer for a
// message it has claimed in the matcher, so a failed operation never
// returns a buffer to the caller that the peer may still write into.
//
// Advertised rendezvous: a receive larger than the eager limit that is
// posted before its RTS came is claimed at once and its buffer offered to
// the sender (kindAdv), so a send of the same size and descriptor is
// written straight away: one half round trip instead of three (RTS, CTS,
// data), which is most of a medium message's time when wake-ups are slow.
// An offer that does not fit is refused (kindNack) and the RTS goes the
// ordinary way; one overtaken by an eager message is withdrawn
// (kindCancel); a failed operation asks it back (kindRevoke) and fails the
// receive only once the sender confirms (kindRevoked). Config.NoAdvertise
// turns it off.
//
// A progress goroutine polls the completion queue in batches, busy-polls
// for Config.Spin when idle and then blocks on the completion channel. A
// failed completion, the goodbye of a peer that aborted, or a keep-alive
// write that is not acknowledged makes the transport fail with a sticky
// transport.PeerError wrapping transport.ErrPeerLost; every pending
// request fails and nothing waits forever. The goodbye of a peer that
// closed fails only what still involves it, naming it: the transport
// goes on with the other ranks.
package rdma

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

// Queue sizes per peer.
const (
	sqDepth     = 256
	maxSendSGE  = 16
	maxInline   = 128
	pollBatch   = 32
	yieldEvery  = 32      // waitPoll: polls between sched_yield calls
	maxWrite    = 1 << 30 // bytes per RDMA write work request
	byeWait     = 200 * time.Millisecond
	maxFailedOp = 4096
)

// Transport is an RDMA transport.Transport. Create it with New.
type Transport struct {
	cfg      Config
	rank     int
	size     int
	ep       *endpoint
	pd       *verbs.PD
	ch       *verbs.CompChannel
	cq       *verbs.CQ
	peers    []*peer // nil at this rank
	cache    *memreg.Cache[*verbs.MR]
	m        *transport.Matcher
	slotSize int

	stop        atomic.Bool
	done        chan struct{}
	pollMu      sync.Mutex                                            // held while polling and handling completions
	spinning    atomic.Bool                                           // a waiter busy-polls (waitPoll)
	parkedPeers atomic.Int32                                          // peers with ring slots parked for the budget
	sleepers    atomic.Int32                                          // waiters sleeping on their request meanwhile
	kick        chan struct{}                                         // the polling waiter left (progress parks on it)
	waitF       func(ctx context.Context, r *transport.Request) error // t.waitFor, made once
	kaTimer     *time.Timer                                           // progress goroutine only
	byeOut      atomic.Int32
	byeCh       chan struct{}
	touched     []*peer // peers to repost receives or drain after a batch
	closeOne    sync.Once

	sent, recvd, msgsSent, msgsRecvd atomic.Uint64

	mu         sync.Mutex
	err        error
	posted     map[mkey]postedRecv // receives posted, not yet matched
	pendingRTS map[mkey]header     // RTS waiting for its receive
	sends      map[uint32]*rndvSend
	recvs      map[uint32]*rndvRecv
	failed     map[opKey]struct{}
	failedFIFO []opKey
	adverts    map[mkey]*rndvRecv // receiver: buffers on offer, not yet resolved
	advs       map[mkey]header    // sender: offers received before their Send
	sendTags   map[mkey]uint32    // sender: rendezvous sends waiting for a CTS or an offer
	nextSend   uint32
	nextRecv   uint32
}

type postedRecv struct {
	req *transport.Request
	buf []byte
}

type mkey struct {
	peer int
	tag  transport.Tag
}

type opKey struct {
	comm uint32
	seq  uint64
}

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

func (rr *rndvRecv) release() {
	if rr.own != nil {
		rr.own.Close()
		return
	}
	rr.handle.Release()
}

var _ transport.Transport = (*Transport)(nil)

// New opens the RDMA device, connects to every peer through cfg.Store and
// starts the progress goroutine. ctx bounds the connection set-up.
func New(ctx context.Context, cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ep, err := openEndpoint(&cfg)
	if err != nil {
		return nil, err
	}
	soft := softDevice(ep.ctx.Name())
	cfg.setSpinDefaults(soft)
	if soft {
		cfg.Log.Infof(logging.RDMA, "%s is a software device: waiters poll the completion queue for %v, the progress loop for %v",
			ep.ctx.Name(), max(cfg.WaitSpin, 0), max(cfg.Spin, 0))
	}
	t := &Transport{
		cfg: cfg, rank: cfg.Rank, size: cfg.Size, ep: ep,
		m:          transport.NewMatcher(cfg.Rank, cfg.UnexpectedLimit),
		slotSize:   (hdrSize + cfg.EagerLimit + 63) &^ 63,
		done:       make(chan struct{}),
		byeCh:      make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
		kaTimer:    time.NewTimer(time.Hour),
		peers:      make([]*peer, cfg.Size),
		posted:     make(map[mkey]postedRecv),
		pendingRTS: make(map[mkey]header),
		sends:      make(map[uint32]*rndvSend),
		recvs:      make(map[uint32]*rndvRecv),
		failed:     make(map[opKey]struct{}),
		adverts:    make(map[mkey]*rndvRecv),
		advs:       make(map[mkey]header),
		sendTags:   make(map[mkey]uint32),
	}
	t.waitF = t.waitFor
	if err := t.setup(ctx); err != nil {
		close(t.done)
		t.destroy()
		return nil, err
	}
	go t.progress()
	return t, nil
}

func (t *Transport) setup(ctx context.Context) error {
	cfg := &t.cfg
	if err := t.ep.chooseGID(cfg.GIDIndex); err != nil {
		return err
	}
	ringBytes := 2 * cfg.Slots * t.slotSize
	if err := memreg.CheckMemlock(uint64((t.size - 1) * ringBytes)); err != nil {
		return fmt.Errorf("rdma: %w", err)
	}
	da, err := t.ep.ctx.QueryDevice()
	if err != nil {
		return err
	}
	cfg.Log.Infof(logging.RDMA, "using %s port %d (%s, active MTU %s, LID %d, GID index %d %v %v)",
		t.ep.ctx.Name(), t.ep.port, t.ep.attr.LinkLayer, t.ep.attr.ActiveMTU, t.ep.attr.LID,
		t.ep.gid.Index, t.ep.gid.GID, t.ep.gid.Type)
	if t.pd, err = t.ep.ctx.AllocPD(); err != nil {
		return err
	}
	t.cache = memreg.NewCache[*verbs.MR](memreg.RegistrarFunc[*verbs.MR](func(b []byte) (*verbs.MR, error) {
		return t.pd.RegMR(b, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}), cfg.CacheEntries, cfg.CacheBytes)
	if t.ch, err = t.ep.ctx.NewCompChannel(); err != nil {
		return err
	}
	sq := min(sqDepth, da.MaxQPWR)
	rq := min(2*cfg.Slots+32, da.MaxQPWR)
	cqe := (t.size-1)*(sq+rq) + 1
	if cqe > da.MaxCQE {
		return fmt.Errorf("rdma: %d ranks need a completion queue of %d entries, %s allows %d",
			t.size, cqe, t.ep.ctx.Name(), da.MaxCQE)
	}
	if t.cq, err = t.ep.ctx.NewCQ(cqe, pollBatch, t.ch); err != nil {
		return err
	}
	caps := verbs.QPCaps{MaxSendWR: sq, MaxRecvWR: rq, MaxSendSGE: min(maxSendSGE, da.MaxSGE),
		MaxRecvSGE: 1, MaxInline: maxInline}
	for r := range t.peers {
		if r == t.rank {
			continue
		}
		p, err := t.newPeer(r, caps, ringBytes)
		if err != nil {
			return err
		}
		t.peers[r] = p
	}
	if err := t.connect(ctx); err != nil {
		return err
	}
	return nil
}

// connect exchanges connection data with every peer, brings each QP to
// RTS and waits until every rank has done so, so that no rank writes to a
// QP that is not ready to receive.
func (t *Transport) connect(ctx context.Context) error {
	pfx := t.cfg.KeyPrefix
	local := t.ep.attr
	for r, p := range t.peers {
		if p == nil {
			continue
		}
		info := connInfo{LinkLayer: uint8(local.LinkLayer), MTU: uint8(local.ActiveMTU), LID: local.LID,
			QPN: p.qp.Num(), PSN: p.psn, GID: t.ep.gid.GID, RingAddr: addrOf(p.buf.Bytes()),
			RingRKey: p.mr.RKey(), Slots: uint32(p.slots), SlotSize: uint32(t.slotSize)}
		if err := t.cfg.Store.Set(ctx, fmt.Sprintf("%s/conn/%d/%d", pfx, t.rank, r), info.encode()); err != nil {
			return fmt.Errorf("rdma: publishing connection data for rank %d: %w", r, err)
		}
	}
	for r, p := range t.peers {
		if p == nil {
			continue
		}
		b, err := t.cfg.Store.Get(ctx, fmt.Sprintf("%s/conn/%d/%d", pfx, r, t.rank))
		if err != nil {
			return fmt.Errorf("rdma: waiting for rank %d's connection data: %w", r, err)
		}
		if err := p.remote.decode(b); err != nil {
			return fmt.Errorf("rdma: rank %d: %w", r, err)
		}
		if err := t.connectPeer(p); err != nil {
			return err
		}
	}
	if err := t.cfg.Store.Set(ctx, fmt.Sprintf("%s/ready/%d", pfx, t.rank), []byte{1}); err != nil {
		return fmt.Errorf("rdma: publishing readiness: %w", err)
	}
	for r := range t.peers {
		if r == t.rank {
			continue
		}
		if _, err := t.cfg.Store.Get(ctx, fmt.Sprintf("%s/ready/%d", pfx, r)); err != nil {
			return fmt.Errorf("rdma: waiting for rank %d to connect: %w", r, err)
		}
	}
	return nil
}

func (t *Transport) connectPeer(p *peer) error {
	rem, local := &p.remote, t.ep.attr
	if verbs.LinkLayer(rem.LinkLayer) != local.LinkLayer {
		return fmt.Errorf("rdma: rank %d is on %s but rank %d is on %s", t.rank, local.LinkLayer,
			p.rank, verbs.LinkLayer(rem.LinkLayer))
	}
	if int(rem.Slots) != p.slots || int(rem.SlotSize) != t.slotSize {
		return fmt.Errorf("rdma: rank %d uses %d ring slots of %d bytes, rank %d uses %d of %d: "+
			"all ranks must use the same eager limit and slot count", t.rank, p.slots, t.slotSize,
			p.rank, rem.Slots, rem.SlotSize)
	}
	mtu := min(local.ActiveMTU, verbs.MTU(rem.MTU))
	if mtu != local.ActiveMTU {
		t.cfg.Log.Infof(logging.RDMA, "path MTU to rank %d is %s (local %s, remote %s)",
			p.rank, mtu, local.ActiveMTU, verbs.MTU(rem.MTU))
	}
	a := verbs.RTRAttr{RemoteQPN: rem.QPN, RemotePSN: rem.PSN, MTU: mtu, DestLID: rem.LID}
	if local.LinkLayer == verbs.LinkLayerEthernet {
		a.GRH, a.DestGID, a.SGIDIndex = true, verbs.GID(rem.GID), t.ep.gid.Index
	} else if rem.LID == 0 {
		return fmt.Errorf("rdma: rank %d's InfiniBand port has no LID (is a subnet manager running?)", p.rank)
	}
	if err := p.qp.ToRTR(a); err != nil {
		return fmt.Errorf("rdma: connecting rank %d to rank %d: %w", t.rank, p.rank, err)
	}
	if err := p.qp.ToRTS(verbs.RTSAttr{PSN: p.psn, Timeout: t.cfg.AckTimeout,
		RetryCnt: t.cfg.RetryCount}); err != nil {
		return fmt.Errorf("rdma: connecting rank %d to rank %d: %w", t.rank, p.rank, err)
	}
	return nil
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return "rdma" }

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// Device names the device and port in use ("rxe0:1").
func (t *Transport) Device() string { return fmt.Sprintf("%s:%d", t.ep.ctx.Name(), t.ep.port) }

func (t *Transport) checkPeer(peer int) error {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return fmt.Errorf("%w: rank %d: peer %d out of range [0,%d) or self", transport.ErrInvalid, t.rank, peer, t.size)
	}
	return nil
}

// Send implements transport.Transport.
func (t *Transport) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	if err := t.Err(); err != nil {
		return transport.Failed(peer, tag, true, err)
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	req := transport.NewRequest(peer, tag, true)
	req.SetWaiter(t.waitF)
	p := t.peers[peer]
	if n <= t.cfg.EagerLimit {
		t.enqueue(p, &outMsg{hdr: header{Kind: kindData, Tag: tag, Desc: desc}, bufs: bufs, req: req})
		return req
	}
	rs := &rndvSend{req: req, peer: peer, desc: desc, bufs: bufs, n: n}
	k := mkey{peer, tag}
	t.mu.Lock()
	if err := cmp.Or(t.err, p.gone); err != nil {
		t.mu.Unlock()
		req.Complete(nil, err)
		return req
	}
	t.nextSend++
	id := t.nextSend
	t.sends[id] = rs
	adv, offered := t.advs[k]
	delete(t.advs, k)
	t.mu.Unlock()
	if offered && t.useAdvert(p, rs, id, adv) {
		return req // written straight into the offered buffer
	}
	t.enqueue(p, &outMsg{hdr: header{Kind: kindRTS, Tag: tag, Desc: desc, Size: uint64(n), ID: id}})
	// An offer arriving from now on takes the send over; one that came
	// while the RTS was being queued is taken here. The RTS is queued
	// first so that it never follows the payload.
	t.mu.Lock()
	adv, offered = t.advs[k]
	delete(t.advs, k)
	if !offered && t.sends[id] != nil {
		t.sendTags[k] = id
	}
	t.mu.Unlock()
	if offered {
		t.useAdvert(p, rs, id, adv)
	}
	return req
}

// Recv implements transport.Transport.
func (t *Transport) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	req := t.recv(peer, tag, desc, buf)
	t.unpark() // the receive may be for a parked message, or make room
	return req
}

func (t *Transport) recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	if err := t.checkPeer(peer); err != nil {
		return transport.Failed(peer, tag, false, err)
	}
	k := mkey{peer, tag}
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return transport.Failed(peer, tag, false, err)
	}
	req := t.m.Post(peer, tag, desc, buf)
	req.SetWaiter(t.waitF)
	if done, _ := req.Test(); done {
		t.mu.Unlock()
		return req
	}
	rts, ok := t.pendingRTS[k]
	if !ok {
		if !t.cfg.NoAdvertise && len(buf) > t.cfg.EagerLimit && len(buf) <= 1<<32-1 {
			adv, err := t.advertiseLocked(peer, tag, desc, req, buf)
			t.mu.Unlock()
			if err != nil {
				t.fail(err)
			} else if adv != nil {
				t.sendAdvert(peer, adv)
			}
			return req
		}
		t.posted[k] = postedRecv{req, buf}
		t.mu.Unlock()
		return req
	}
	delete(t.pendingRTS, k)
	cts, err := t.claimLocked(peer, rts, buf)
	t.mu.Unlock()
	t.enqueue(t.peers[peer], &outMsg{hdr: cts})
	if err != nil {
		t.fail(err)
	}
	return req
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

func (t *Transport) newRecvIDLocked() uint32 {
	t.nextRecv = (t.nextRecv + 1) & immMask
	if t.nextRecv == 0 {
		t.nextRecv = 1
	}
	return t.nextRecv
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

// FailOp implements transport.Transport: the peers are told err's code
// and text.
func (t *Transport) FailOp(comm uint32, seq uint64, err error) {
	t.failOp(comm, seq, err)
	failure := failurePayload(t.rank, err, t.cfg.EagerLimit)
	for _, p := range t.peers {
		if p != nil {
			t.enqueue(p, &outMsg{hdr: header{Kind: kindFailOp, Tag: transport.Tag{Comm: comm, Seq: seq}},
				bufs: [][]byte{failure}})
		}
	}
	t.unpark() // the operation's unexpected messages are gone: room for parked ones
}

// failOp fails (comm, seq) on this rank: its receives, and the RTS of
// peers waiting for a receive of it, which are told to drop the message.
func (t *Transport) failOp(comm uint32, seq uint64, err error) {
	t.m.FailOp(comm, seq, err)
	op := opKey{comm, seq}
	type discard struct {
		peer int
		cts  header
	}
	var drops []discard
	t.mu.Lock()
	if _, seen := t.failed[op]; !seen {
		t.failed[op] = struct{}{}
		t.failedFIFO = append(t.failedFIFO, op)
		if len(t.failedFIFO) > maxFailedOp {
			delete(t.failed, t.failedFIFO[0])
			t.failedFIFO = t.failedFIFO[1:]
		}
	}
	for k := range t.posted {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			delete(t.posted, k)
		}
	}
	for k, rts := range t.pendingRTS {
		if k.tag.Comm == comm && k.tag.Seq == seq {
			delete(t.pendingRTS, k)
			drops = append(drops, discard{k.peer, header{Kind: kindCTS, Tag: rts.Tag, ID: rts.ID, Flags: ctsDiscard}})
		}
	}
	revokes := t.revokeAdvertsLocked(comm, seq, func(*advert) error { return err })
	t.mu.Unlock()
	for _, d := range drops {
		t.enqueue(t.peers[d.peer], &outMsg{hdr: d.cts})
	}
	t.sendRevokes(revokes)
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

// kindMismatchLocked follows the matcher's per-operation kind check when a
// message of another collective kind arrived for an operation this rank
// runs: the matcher failed the operation's posted receives, and the
// receives whose buffers are on offer fail too, with the same mismatch.
// Called with t.mu held; the revokes are for sendRevokes.
func (t *Transport) kindMismatchLocked(peer int, tag transport.Tag, remote transport.Desc) []revoke {
	for k := range t.posted {
		if k.tag.Comm == tag.Comm && k.tag.Seq == tag.Seq {
			delete(t.posted, k)
		}
	}
	return t.revokeAdvertsLocked(tag.Comm, tag.Seq, func(a *advert) error {
		return &transport.MismatchError{Tag: tag, Local: a.desc, Peer: peer, Remote: remote, Rank: t.rank}
	})
}

// Abort implements transport.Transport: peers are told, then every queue
// pair is moved to the error state and everything pending fails.
func (t *Transport) Abort(err error) {
	if t.Err() == nil {
		t.sayBye(fmt.Sprintf("rank %d aborted: %v", t.rank, err), byeAborted)
	}
	t.fail(fmt.Errorf("%w: %w", transport.ErrAborted, err))
}

// Err implements transport.Transport.
func (t *Transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stats implements transport.Transport.
func (t *Transport) Stats() transport.Stats {
	return transport.Stats{BytesSent: t.sent.Load(), BytesRecv: t.recvd.Load(),
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecvd.Load()}
}

// CacheStats returns the registration cache's counters.
func (t *Transport) CacheStats() memreg.CacheStats { return t.cache.Stats() }

// Close implements transport.Transport. Peers see this rank as lost.
func (t *Transport) Close() error {
	t.closeOne.Do(func() {
		if err := t.Err(); err == nil {
			t.sayBye(fmt.Sprintf("rank %d closed its transport", t.rank), 0)
		} else {
			// Peers still connected learn the root cause (for example
			// which rank died) rather than just this rank's departure.
			t.sayBye(fmt.Sprintf("rank %d closed its transport after: %v", t.rank, err), 0)
		}
		t.fail(transport.ErrClosed)
		t.stop.Store(true)
		t.wake()
		<-t.done
		// A waiter may be polling: pollMu keeps it off the completion
		// queue while it is destroyed (it sees stop once it gets in).
		t.pollMu.Lock()
		t.destroy()
		t.pollMu.Unlock()
	})
	return nil
}

// sayBye tells every peer this rank is going away (flags: byeAborted for
// Abort), and waits briefly for the messages to be acknowledged so that
// moving the queue pairs to the error state does not flush them.
func (t *Transport) sayBye(reason string, flags uint32) {
	for _, p := range t.peers {
		if p != nil {
			t.byeOut.Add(1)
			t.enqueue(p, &outMsg{hdr: header{Kind: kindBye, Flags: flags}, bufs: [][]byte{[]byte(reason)}, bye: true})
		}
	}
	deadline := time.NewTimer(byeWait)
	defer deadline.Stop()
	for t.byeOut.Load() > 0 {
		select {
		case <-t.byeCh:
		case <-deadline.C:
			return
		}
	}
}

// fail makes err the transport's sticky error (the first one wins) and
// fails everything pending. Queue pairs go to the error state first, so
// that no peer can write into a buffer after its request has failed.
func (t *Transport) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	err = t.err
	sends, recvs := t.sends, t.recvs
	t.sends, t.recvs = map[uint32]*rndvSend{}, map[uint32]*rndvRecv{}
	clear(t.posted)
	clear(t.pendingRTS)
	clear(t.adverts)
	clear(t.advs)
	clear(t.sendTags)
	t.mu.Unlock()
	// A lost peer fails this rank's operations, but only the dead peer's
	// queue pair goes to the error state: the other ranks must learn of
	// the death from the dead rank itself (their own keep-alives, or this
	// rank's goodbye naming the cause), not from a cascade of queue pairs
	// failing that would name whoever noticed first.
	lost := -1
	var pe *transport.PeerError
	if errors.As(err, &pe) && errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrAborted) {
		lost = pe.Peer
	}
	for _, p := range t.peers {
		if p != nil && (lost < 0 || p.rank == lost) {
			p.kill(err)
		}
	}
	t.m.Abort(err)
	for _, rs := range sends {
		for _, h := range rs.handles {
			h.Release()
		}
		rs.req.Complete(nil, err)
	}
	for _, rr := range recvs {
		rr.release() // the request was failed by the matcher
	}
}

func (t *Transport) peerLost(peer int, cause error) {
	if t.Err() != nil {
		return
	}
	t.cfg.Log.Warnf(logging.RDMA, "lost rank %d: %v", peer, cause)
	t.fail(&transport.PeerError{Peer: peer, Kind: transport.ErrPeerLost, Err: cause})
}

// peerClosed handles a peer's goodbye from Close. A graceful close is not
// a failure of the job: everything the peer sent before it has been
// handled (the goodbye is its last message), so only what still involves
// the peer fails, with an error naming it, and the transport goes on with
// the other ranks. The peer's queue pair goes to the error state, its
// completion errors from then on are expected.
func (t *Transport) peerClosed(p *peer, reason string) {
	err := &transport.PeerError{Peer: p.rank, Kind: transport.ErrPeerLost, Err: errors.New(reason)}
	var sends []*rndvSend
	var recvs []*rndvRecv
	t.mu.Lock()
	if t.err != nil || p.gone != nil {
		t.mu.Unlock()
		return
	}
	p.gone = err
	for id, rs := range t.sends {
		if rs.peer == p.rank {
			delete(t.sends, id)
			sends = append(sends, rs)
		}
	}
	for id, rr := range t.recvs {
		if rr.peer == p.rank {
			delete(t.recvs, id)
			recvs = append(recvs, rr)
		}
	}
	ofPeer := func(k mkey) bool { return k.peer == p.rank }
	maps.DeleteFunc(t.posted, func(k mkey, _ postedRecv) bool { return ofPeer(k) })
	maps.DeleteFunc(t.pendingRTS, func(k mkey, _ header) bool { return ofPeer(k) })
	maps.DeleteFunc(t.advs, func(k mkey, _ header) bool { return ofPeer(k) })
	maps.DeleteFunc(t.adverts, func(k mkey, _ *rndvRecv) bool { return ofPeer(k) })
	maps.DeleteFunc(t.sendTags, func(k mkey, _ uint32) bool { return ofPeer(k) })
	// Under t.mu, so that no receive from the peer is posted between
	// this and the matcher knowing it is gone.
	t.m.FailPeer(p.rank, err)
	t.mu.Unlock()
	t.cfg.Log.Tracef(logging.RDMA, "%v", err)
	p.kill(err)
	for _, rs := range sends {
		for _, h := range rs.handles {
			h.Release()
		}
		rs.req.Complete(nil, err)
	}
	for _, rr := range recvs {
		rr.release()
		if rr.adv != nil {
			rr.adv.req.Complete(nil, err)
			rr.done()
		} else {
			rr.fail(err)
		}
	}
}

func (t *Transport) protocolError(peer int, err error) {
	if t.Err() != nil {
		return
	}
	t.fail(&transport.PeerError{Peer: peer, Kind: transport.ErrProtocol, Err: err})
}

// destroy releases every verbs object, in dependency order.
func (t *Transport) destroy() {
	for _, p := range t.peers {
		if p != nil {
			p.destroy()
		}
	}
	if t.cache != nil {
		t.cache.Close()
	}
	if t.cq != nil {
		t.cq.Close()
	}
	if t.ch != nil {
		t.ch.Close()
	}
	if t.pd != nil {
		t.pd.Close()
	}
	t.ep.ctx.Close()
}

// wake interrupts the progress loop's wait, for Close.
func (t *Transport) wake() {
	t.ch.Interrupt()
	t.kickProgress()
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func randPSN() uint32 { return rand.Uint32() & 0xffffff }
