//go:build linux

package shm

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sparcml/sparcml/fallback"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/transporttest"
)

// hostOf puts ranks on emulated hosts of two: {0,1}, {2,3}, ...
func hostOf(rank int) int { return rank / 2 }

// startRoutes starts size ranks in this process, each a transport.Route
// over shared memory for the ranks of its host and TCP over loopback for
// the others, as Init would build them.
func startRoutes(t testing.TB, size int, limit int64) []*transport.Route {
	t.Helper()
	store := bootstrap.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rs := make([]*transport.Route, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[r], errs[r] = startRoute(ctx, store, r, size, limit)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, rt := range rs {
			if rt != nil {
				rt.Close()
			}
		}
		store.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return rs
}

func startRoute(ctx context.Context, store bootstrap.Store, rank, size int, limit int64) (*transport.Route, error) {
	var peers []int
	via := make([]int, size)
	for p := range size {
		if hostOf(p) == hostOf(rank) {
			peers = append(peers, p)
		} else {
			via[p] = 1
		}
	}
	s, err := New(ctx, Config{Rank: rank, Size: size, Peers: peers, Store: store, Token: testToken, UnexpectedLimit: limit})
	if err != nil {
		return nil, err
	}
	tcp, err := fallback.New(ctx, fallback.Config{Rank: rank, Size: size, Store: store, Token: testToken, UnexpectedLimit: limit})
	if err != nil {
		s.Close()
		return nil, err
	}
	return transport.NewRoute([]transport.Transport{s, tcp}, via)
}

// TestRouteConformance runs the conformance suite on a job whose ranks 0
// and 1 share memory and reach rank 2 over TCP.
func TestRouteConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, cfg transporttest.Config) []transport.Transport {
		var ts []transport.Transport
		for _, rt := range startRoutes(t, cfg.Size, cfg.UnexpectedLimit) {
			ts = append(ts, rt)
		}
		return ts
	})
}

// TestRouteTwoHosts: four ranks on two emulated hosts, every rank sending
// every other one a small and a large message; each travels on its pair's
// transport (the per-transport Stats show it), and everything arrives.
// Then a rank lost to its host's shared memory fails the requests its
// neighbour has pending over TCP, naming it.
func TestRouteTwoHosts(t *testing.T) {
	rs := startRoutes(t, 4, 0)
	desc := transport.Desc{Kind: transport.OpP2P}
	sizes := []int{100, 1 << 20}
	var sends, recvs []*transport.Request
	var want [][]byte
	for r, rt := range rs {
		for p := range rs {
			if p == r {
				continue
			}
			for i, n := range sizes {
				tag := transport.Tag{Comm: 1, Seq: uint64(i), Step: uint32(r)}
				sends = append(sends, rt.Send(p, tag, desc, payload(r, p, n)))
				recvs = append(recvs, rs[p].Recv(r, tag, desc, nil))
				want = append(want, payload(r, p, n))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i, r := range recvs {
		if err := r.Wait(ctx); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		if string(r.Data()) != string(want[i]) {
			t.Fatalf("%v: wrong payload", r)
		}
	}
	for _, s := range sends {
		if err := s.Wait(ctx); err != nil {
			t.Fatalf("%v: %v", s, err)
		}
	}
	per := uint64(sizes[0] + sizes[1])
	for r, rt := range rs {
		shm, tcp := rt.Parts()[0].Stats(), rt.Parts()[1].Stats()
		if shm.BytesSent != per || shm.MsgsSent != 2 || tcp.BytesSent != 2*per || tcp.MsgsSent != 4 {
			t.Errorf("rank %d: shm %+v, tcp %+v; want 2 messages (%d bytes) over shm and 4 (%d) over tcp", r, shm, tcp, per, 2*per)
		}
		if rt.Via(r^1).Name() != "shm" {
			t.Errorf("rank %d reaches rank %d through %s", r, r^1, rt.Via(r^1).Name())
		}
	}

	pending := rs[0].Recv(2, transport.Tag{Comm: 2}, desc, nil) // over TCP
	rs[1].Parts()[0].Abort(errors.New("on purpose"))            // rank 1's shared memory only
	err := pending.Wait(ctx)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("rank 0's receive from rank 2 after rank 1 failed on shared memory: %v, want rank 1 lost", err)
	}
	t.Logf("rank 0: %v", err)
}

func payload(from, to, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*31 + to*7 + i)
	}
	return b
}
