package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// hostOf puts ranks on hosts of two: {0,1}, {2,3}, ...
func hostOf(rank int) int { return rank / 2 }

// routes builds, for every rank, a Route over two in-memory meshes: the
// first for the ranks of its host, the second for the others.
func routes(t *testing.T, size int, limit int64) []*transport.Route {
	t.Helper()
	near := transport.NewInMemoryLimit(size, limit)
	far := transport.NewInMemoryLimit(size, limit)
	rs := make([]*transport.Route, size)
	for r := range size {
		via := make([]int, size)
		for p := range via {
			if hostOf(p) != hostOf(r) {
				via[p] = 1
			}
		}
		rt, err := transport.NewRoute([]transport.Transport{near[r], far[r]}, via)
		if err != nil {
			t.Fatal(err)
		}
		rs[r] = rt
	}
	t.Cleanup(func() {
		for _, rt := range rs {
			rt.Close()
		}
	})
	return rs
}

// TestRouteConformance runs the transport contract's suite on a Route
// over two transports, ranks 0 and 1 sharing one, rank 2 reached through
// the other.
func TestRouteConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
		var ts []transport.Transport
		for _, rt := range routes(t, cfg.Size, cfg.UnexpectedLimit) {
			ts = append(ts, rt)
		}
		return ts
	})
}

// TestRouteStatsAndVia: each message travels on its peer's transport,
// Stats adds the parts up, and Via names the transport of a peer.
func TestRouteStatsAndVia(t *testing.T) {
	rs := routes(t, 4, 0)
	desc := transport.Desc{Kind: transport.OpP2P}
	var reqs []*transport.Request
	for r, rt := range rs {
		for p := range rs {
			if p != r {
				tag := transport.Tag{Comm: 1, Seq: uint64(p), Step: uint32(r)}
				reqs = append(reqs, rt.Send(p, tag, desc, make([]byte, 100*(1+hostOf(r)))))
				reqs = append(reqs, rs[p].Recv(r, tag, desc, nil))
			}
		}
	}
	for _, req := range reqs {
		if err := req.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Rank 0 sends 100 bytes to rank 1 (near) and 2 and 3 (far).
	parts := rs[0].Parts()
	if got := parts[0].Stats(); got.MsgsSent != 1 || got.BytesSent != 100 || got.MsgsRecv != 1 || got.BytesRecv != 100 {
		t.Errorf("rank 0's near transport: %+v, want one message of 100 bytes each way", got)
	}
	if got := parts[1].Stats(); got.MsgsSent != 2 || got.BytesSent != 200 || got.MsgsRecv != 2 || got.BytesRecv != 400 {
		t.Errorf("rank 0's far transport: %+v, want two messages of 100 bytes out and two of 200 in", got)
	}
	if got, want := rs[0].Stats(), (transport.Stats{BytesSent: 300, BytesRecv: 500, MsgsSent: 3, MsgsRecv: 3}); got != want {
		t.Errorf("rank 0's Stats %+v, want the sum %+v", got, want)
	}
	if rs[0].Via(1) != parts[0] || rs[0].Via(3) != parts[1] || rs[0].Via(0) != nil {
		t.Errorf("Via does not name the routes")
	}
	if rs[0].Name() != "inmem+inmem" {
		t.Errorf("Name %q", rs[0].Name())
	}
}

// TestRouteLossSpreads: a peer lost on one transport fails the requests
// pending on the other, with an error naming the lost rank and the
// transport that saw it.
func TestRouteLossSpreads(t *testing.T) {
	rs := routes(t, 4, 0)
	desc := transport.Desc{Kind: transport.OpP2P}
	far := rs[0].Recv(2, transport.Tag{Comm: 1}, desc, nil) // pending on the far transport
	// Rank 1 fails on the near transport only: rank 0's far transport
	// learns of it from the Route alone.
	rs[1].Parts()[0].Abort(errors.New("on purpose"))
	err := far.Wait(t.Context())
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, transport.ErrPeerLost) || !strings.HasPrefix(pe.Error(), "rank 1") {
		t.Fatalf("rank 0's receive from rank 2 after rank 1 aborted: %v, want a lost-peer error naming rank 1", err)
	}
	if !strings.Contains(err.Error(), "inmem: ") {
		t.Errorf("the spread error %q does not name the transport that saw the loss", err)
	}
	if got := rs[0].Err(); !errors.As(got, &pe) || pe.Peer != 1 {
		t.Fatalf("rank 0's Err = %v, want rank 1 lost", got)
	}
	if _, err := transport.NewRoute([]transport.Transport{transport.NewInMemory(2)[0], transport.NewInMemory(3)[0]}, []int{0, 0}); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("NewRoute over transports of different sizes: %v, want ErrInvalid", err)
	}
}
