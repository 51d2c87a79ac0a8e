package verbs_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/verbs"
	"github.com/stretchr/testify/require"
)

func TestEnums(t *testing.T) {
	require.Equal(t, 4096, verbs.MTU4096.Bytes())
	require.Equal(t, 256, verbs.MTU256.Bytes())
	require.Zero(t, verbs.MTU(9).Bytes())
	require.Equal(t, "ACTIVE", verbs.PortActive.String())
	require.Equal(t, "RTS", verbs.QPRTS.String())
	require.Equal(t, "Ethernet", verbs.LinkLayerEthernet.String())
	var g verbs.GID
	require.True(t, g.IsZero())
	require.False(t, g.IPv4Mapped())
	copy(g[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 199, 0, 1})
	require.True(t, g.IPv4Mapped())
	require.Equal(t, "10.199.0.1", g.String())
	copy(g[:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56})
	require.False(t, g.IPv4Mapped())
	require.NotEmpty(t, verbs.WCRetryExcErr.String())
}

func TestVerbError(t *testing.T) {
	err := error(&verbs.VerbError{Verb: "ibv_modify_qp(RTR)", Object: "rxe0 port 1", Err: syscall.EINVAL})
	require.Equal(t, "ibv_modify_qp(RTR) on rxe0 port 1: invalid argument", err.Error())
	require.True(t, errors.Is(err, syscall.EINVAL))
}

// TestUnavailable runs where there is no RDMA device or no libibverbs.
func TestUnavailable(t *testing.T) {
	names, err := verbs.Devices()
	if err == nil {
		t.Skipf("RDMA devices present: %v", names)
	}
	require.ErrorIs(t, err, verbs.ErrUnavailable)
	if verbs.Built {
		require.EqualError(t, err, "RDMA not available: no RDMA devices found")
	} else {
		require.EqualError(t, err, "RDMA not available: built without libibverbs")
	}
	_, err = verbs.Open("")
	require.ErrorIs(t, err, verbs.ErrUnavailable)
}

// TestLoopback connects two queue pairs of one device to each other and
// moves data with a chained RDMA write + RDMA write with immediate, checks
// the completions, then moves a QP to ERR and sees the flush. It needs a
// device (soft-RoCE in the test/vm guest).
func TestLoopback(t *testing.T) {
	names, err := verbs.Devices()
	if err != nil {
		t.Skip(err)
	}
	ctx, err := verbs.Open(names[0])
	require.NoError(t, err)
	defer ctx.Close()
	da, err := ctx.QueryDevice()
	require.NoError(t, err)
	t.Logf("%s: fw %q guid %#x ports %d max_qp_wr %d max_sge %d max_cqe %d", ctx.Name(), da.FWVer,
		da.NodeGUID, da.PhysPortCnt, da.MaxQPWR, da.MaxSGE, da.MaxCQE)
	const port = 1
	pa, err := ctx.QueryPort(port)
	require.NoError(t, err)
	t.Logf("port 1: %s %s mtu %s/%s lid %d gids %d", pa.State, pa.LinkLayer, pa.ActiveMTU, pa.MaxMTU, pa.LID, pa.GIDTblLen)
	if pa.State != verbs.PortActive {
		t.Skipf("port 1 is %s", pa.State)
	}
	gids, err := ctx.GIDTable(port)
	require.NoError(t, err)
	require.NotEmpty(t, gids)
	gidx := gids[0]
	for _, g := range gids {
		t.Logf("gid %d %v %v ifindex %d", g.Index, g.GID, g.Type, g.IfIndex)
		if g.Type == verbs.GIDTypeRoCEv2 && g.GID.IPv4Mapped() {
			gidx = g
		}
	}
	one, err := ctx.QueryGID(port, gidx.Index)
	require.NoError(t, err)
	require.Equal(t, gidx.GID, one.GID)

	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	ch, err := ctx.NewCompChannel()
	require.NoError(t, err)
	defer ch.Close()
	cq, err := ctx.NewCQ(64, 16, ch)
	require.NoError(t, err)
	defer cq.Close()

	buf, err := memreg.Alloc(1<<16, false)
	require.NoError(t, err)
	defer buf.Free()
	mr, err := pd.RegMR(buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	defer mr.Close()

	caps := verbs.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1}
	a, err := pd.CreateQP(port, cq, cq, caps)
	require.NoError(t, err)
	defer a.Close()
	b, err := pd.CreateQP(port, cq, cq, caps)
	require.NoError(t, err)
	defer b.Close()
	for _, q := range []*verbs.QP{a, b} {
		require.NoError(t, q.ToInit(verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	}
	_, err = b.PostRecv([]verbs.RecvWR{{ID: 100}, {ID: 101}})
	require.NoError(t, err)
	connect := func(q, peer *verbs.QP) {
		rtr := verbs.RTRAttr{RemoteQPN: peer.Num(), RemotePSN: 7, MTU: pa.ActiveMTU, DestLID: pa.LID}
		if pa.LinkLayer == verbs.LinkLayerEthernet {
			rtr.GRH, rtr.DestGID, rtr.SGIDIndex = true, gidx.GID, gidx.Index
		}
		require.NoError(t, q.ToRTR(rtr))
		require.NoError(t, q.ToRTS(verbs.RTSAttr{PSN: 7}))
		s, err := q.State()
		require.NoError(t, err)
		require.Equal(t, verbs.QPRTS, s)
	}
	connect(a, b)
	connect(b, a)

	mem := buf.Bytes()
	for i := 0; i < 1000; i++ {
		mem[i] = byte(i)
	}
	base := mr.Addr()
	// A chain: a plain write of 1000 bytes gathered from two SGEs, then a
	// write with immediate; only the last is signaled.
	n, err := a.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.OpRDMAWrite, SGEs: []verbs.SGE{{Addr: base, Length: 600, LKey: mr.LKey()},
			{Addr: base + 600, Length: 400, LKey: mr.LKey()}}, RemoteAddr: base + 4096, RKey: mr.RKey()},
		{ID: 2, Opcode: verbs.OpRDMAWriteWithImm, SGEs: []verbs.SGE{{Addr: base, Length: 10, LKey: mr.LKey()}},
			RemoteAddr: base + 8192, RKey: mr.RKey(), Imm: 0xabcd1234, Signaled: true},
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	wcs := poll(t, cq, ch, 2)
	var sawSend, sawRecv bool
	for _, wc := range wcs {
		require.Equal(t, verbs.WCSuccess, wc.Status, "%v", wc.Status)
		switch wc.ID {
		case 2:
			sawSend = true
			require.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
		case 100:
			sawRecv = true
			require.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
			require.True(t, wc.HasImm)
			require.Equal(t, uint32(0xabcd1234), wc.Imm)
			require.Equal(t, b.Num(), wc.QPNum)
		}
	}
	require.True(t, sawSend && sawRecv)
	require.Equal(t, mem[:1000], mem[4096:5096])
	require.Equal(t, mem[:10], mem[8192:8202])

	// ERR flushes the outstanding receive.
	require.NoError(t, b.ToError())
	wcs = poll(t, cq, ch, 1)
	require.Equal(t, uint64(101), wcs[0].ID)
	require.Equal(t, verbs.WCWRFlushErr, wcs[0].Status)

	// Idempotent Close.
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	_, err = b.PostSend(nil)
	require.NoError(t, err)
	_, err = b.PostRecv([]verbs.RecvWR{{ID: 1}})
	require.ErrorIs(t, err, verbs.ErrClosed)
}

// poll waits for n completions, using the channel between polls.
func poll(t *testing.T, cq *verbs.CQ, ch *verbs.CompChannel, n int) []verbs.WorkCompletion {
	t.Helper()
	var out []verbs.WorkCompletion
	buf := make([]verbs.WorkCompletion, 8)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		require.True(t, time.Now().Before(deadline), "timed out with %d of %d completions", len(out), n)
		k, err := cq.Poll(buf)
		require.NoError(t, err)
		out = append(out, buf[:k]...)
		if k == 0 {
			require.NoError(t, cq.ReqNotify(false))
			time.Sleep(time.Millisecond)
			_, err := cq.GetEvent()
			require.NoError(t, err)
		}
	}
	return out
}

// TestDeadPeerRetry destroys one end of a connection and checks that an
// RDMA write from the other end fails with a retry error (how the
// transport notices a peer that died without a word).
func TestDeadPeerRetry(t *testing.T) {
	names, err := verbs.Devices()
	if err != nil {
		t.Skip(err)
	}
	ctx, err := verbs.Open(names[0])
	require.NoError(t, err)
	defer ctx.Close()
	pa, err := ctx.QueryPort(1)
	require.NoError(t, err)
	gids, err := ctx.GIDTable(1)
	require.NoError(t, err)
	gidx := gids[len(gids)-1]
	for _, g := range gids {
		if g.Type == verbs.GIDTypeRoCEv2 && g.GID.IPv4Mapped() {
			gidx = g
		}
	}
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	cq, err := ctx.NewCQ(64, 16, nil)
	require.NoError(t, err)
	defer cq.Close()
	buf, err := memreg.Alloc(4096, false)
	require.NoError(t, err)
	defer buf.Free()
	mr, err := pd.RegMR(buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	defer mr.Close()
	for _, length := range []uint32{0, 8} {
		caps := verbs.QPCaps{MaxSendWR: 16, MaxRecvWR: 16}
		a, err := pd.CreateQP(1, cq, cq, caps)
		require.NoError(t, err)
		b, err := pd.CreateQP(1, cq, cq, caps)
		require.NoError(t, err)
		for _, q := range []*verbs.QP{a, b} {
			require.NoError(t, q.ToInit(verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
		}
		for _, pair := range [][2]*verbs.QP{{a, b}, {b, a}} {
			rtr := verbs.RTRAttr{RemoteQPN: pair[1].Num(), MTU: pa.ActiveMTU, DestLID: pa.LID}
			if pa.LinkLayer == verbs.LinkLayerEthernet {
				rtr.GRH, rtr.DestGID, rtr.SGIDIndex = true, gidx.GID, gidx.Index
			}
			require.NoError(t, pair[0].ToRTR(rtr))
			require.NoError(t, pair[0].ToRTS(verbs.RTSAttr{Timeout: 14, RetryCnt: 3}))
		}
		require.NoError(t, b.Close())
		wr := verbs.SendWR{ID: 9, Opcode: verbs.OpRDMAWrite, RemoteAddr: mr.Addr(), RKey: mr.RKey(), Signaled: true}
		if length > 0 {
			wr.SGEs = []verbs.SGE{{Addr: mr.Addr(), Length: length, LKey: mr.LKey()}}
		}
		start := time.Now()
		_, err = a.PostSend([]verbs.SendWR{wr})
		require.NoError(t, err)
		wcs := make([]verbs.WorkCompletion, 4)
		n := 0
		for n == 0 && time.Since(start) < 20*time.Second {
			n, err = cq.Poll(wcs)
			require.NoError(t, err)
			time.Sleep(time.Millisecond)
		}
		if n == 0 {
			t.Errorf("length %d: no completion after %v", length, time.Since(start))
		} else {
			t.Logf("length %d: %v after %v", length, wcs[0].Status, time.Since(start))
			require.Equal(t, verbs.WCRetryExcErr, wcs[0].Status)
		}
		require.NoError(t, a.Close())
	}
}
