package rdma

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/verbs"
)

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

func randPSN() uint32 { return rand.Uint32() & 0xffffff }

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
