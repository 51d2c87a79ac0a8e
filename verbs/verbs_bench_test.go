package verbs_test

import (
	"testing"

	"github.com/sparcml/sparcml/memreg"
	"github.com/sparcml/sparcml/verbs"
)

// BenchmarkLoopbackPingPong bounces an 8-byte RDMA write with immediate
// between two connected QPs of one device, busy-polling the CQ from one
// goroutine: the floor under the transport's latency (compare with
// ib_send_lat in the same guest).
func BenchmarkLoopbackPingPong(b *testing.B) {
	names, err := verbs.Devices()
	if err != nil {
		b.Skip(err)
	}
	ctx, err := verbs.Open(names[0])
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Close()
	pa, _ := ctx.QueryPort(1)
	gids, _ := ctx.GIDTable(1)
	gidx := gids[0]
	for _, g := range gids {
		if g.Type == verbs.GIDTypeRoCEv2 && g.GID.IPv4Mapped() {
			gidx = g
		}
	}
	pd, _ := ctx.AllocPD()
	defer pd.Close()
	cq, _ := ctx.NewCQ(256, 16, nil)
	defer cq.Close()
	buf, _ := memreg.Alloc(4096, false)
	defer buf.Free()
	mr, _ := pd.RegMR(buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	defer mr.Close()
	caps := verbs.QPCaps{MaxSendWR: 64, MaxRecvWR: 64, MaxInline: 64}
	qa, _ := pd.CreateQP(1, cq, cq, caps)
	qb, _ := pd.CreateQP(1, cq, cq, caps)
	defer qa.Close()
	defer qb.Close()
	for _, pair := range [][2]*verbs.QP{{qa, qb}, {qb, qa}} {
		pair[0].ToInit(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)
		recvs := make([]verbs.RecvWR, 16)
		pair[0].PostRecv(recvs)
	}
	for _, pair := range [][2]*verbs.QP{{qa, qb}, {qb, qa}} {
		rtr := verbs.RTRAttr{RemoteQPN: pair[1].Num(), MTU: pa.ActiveMTU, DestLID: pa.LID,
			GRH: pa.LinkLayer == verbs.LinkLayerEthernet, DestGID: gidx.GID, SGIDIndex: gidx.Index}
		if err := pair[0].ToRTR(rtr); err != nil {
			b.Fatal(err)
		}
		if err := pair[0].ToRTS(verbs.RTSAttr{}); err != nil {
			b.Fatal(err)
		}
	}
	wcs := make([]verbs.WorkCompletion, 16)
	wait := func(q *verbs.QP) {
		for {
			n, err := cq.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					b.Fatal(wc.Status)
				}
				if wc.Opcode == verbs.WCRecvRDMAWithImm && wc.QPNum == q.Num() {
					q.PostRecv([]verbs.RecvWR{{}})
					return
				}
			}
		}
	}
	send := func(q *verbs.QP) {
		_, err := q.PostSend([]verbs.SendWR{{Opcode: verbs.OpRDMAWriteWithImm, Signaled: true, Inline: true,
			SGEs: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}, RemoteAddr: mr.Addr() + 64, RKey: mr.RKey()}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		send(qa)
		wait(qb)
		send(qb)
		wait(qa)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "us/half-rtt")
}
