package rdma

// These tests need a working RDMA port (soft-RoCE in the test/vm guest)
// and skip elsewhere. Every rank is its own Transport in this process,
// connected through an in-memory store.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
	"github.com/stretchr/testify/require"
)

// testDeadline bounds every multi-rank test; -race in an emulated guest
// is several times slower.
var testDeadline = map[bool]time.Duration{false: 60 * time.Second, true: 180 * time.Second}[raceEnabled]

func needRDMA(tb testing.TB) {
	tb.Helper()
	if err := Available(); err != nil {
		tb.Skipf("no RDMA here: %v", err)
	}
}

// startRanks connects size transports through one memory store.
func startRanks(tb testing.TB, size int, tweak func(*Config)) []*Transport {
	tb.Helper()
	needRDMA(tb)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	st := bootstrap.NewMemStore()
	ts := make([]*Transport, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, Size: size, Store: st, GIDIndex: -1, Device: os.Getenv("SPARCML_IB_DEV")}
			if s, err := time.ParseDuration(os.Getenv("SPARCML_TEST_SPIN")); err == nil {
				cfg.Spin = s // to compare polling policies in benchmarks
			}
			if testing.Verbose() && r == 0 {
				cfg.Log = logging.ToPrintf(tb.Logf)
			}
			if tweak != nil {
				tweak(&cfg)
			}
			ts[r], errs[r] = New(ctx, cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, t := range ts {
				if t != nil {
					t.Close()
				}
			}
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	tb.Cleanup(func() {
		for _, t := range ts {
			t.Close()
		}
	})
	return ts
}

func pattern(src, dst, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + src*31 + dst*101 + n)
	}
	return b
}

func waitCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	tb.Cleanup(cancel)
	return ctx
}

// split cuts b into up to three buffers, to exercise gathering sends.
func split(b []byte, i int) [][]byte {
	switch {
	case len(b) < 3 || i%3 == 0:
		return [][]byte{b}
	case i%3 == 1:
		return [][]byte{b[:len(b)/2], b[len(b)/2:]}
	default:
		return [][]byte{b[:1], b[1 : len(b)-1], {}, b[len(b)-1:]}
	}
}

var desc = transport.Desc{Kind: transport.OpP2P, DType: 1, Count: 1}

// TestAllSizes sends every size across the eager limit from each rank to
// every other, receives posted before and after the data, into exact,
// missing and too small buffers, and checks every byte.
func TestAllSizes(t *testing.T) {
	sizes := []int{0, 1, 7, 64, 4095, defaultEager - 1, defaultEager, defaultEager + 1, 65536, 1<<20 + 3, 4 << 20}
	if raceEnabled {
		sizes = sizes[:len(sizes)-1] // byte loops are slow under -race in an emulated guest
	}
	for _, P := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("P=%d", P), func(t *testing.T) {
			ts := startRanks(t, P, nil)
			ctx := waitCtx(t)
			var wg sync.WaitGroup
			errc := make(chan error, P*P*len(sizes)*2)
			for r := range ts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr := ts[r]
					var recvs []*transport.Request
					var want [][]byte
					// Receives for even sizes are posted before the sends,
					// odd ones after (unexpected / pending RTS paths).
					post := func(odd bool) {
						for peer := range P {
							if peer == r {
								continue
							}
							for i, n := range sizes {
								if (i%2 == 1) != odd {
									continue
								}
								var buf []byte
								switch i % 3 {
								case 0:
									buf = make([]byte, n)
								case 1:
									buf = nil
								case 2:
									buf = make([]byte, n/2)
								}
								tag := transport.Tag{Comm: 1, Seq: uint64(i), Step: uint32(peer)}
								recvs = append(recvs, tr.Recv(peer, tag, desc, buf))
								want = append(want, pattern(peer, r, n))
							}
						}
					}
					post(false)
					var sends []*transport.Request
					for peer := range P {
						if peer == r {
							continue
						}
						for i, n := range sizes {
							tag := transport.Tag{Comm: 1, Seq: uint64(i), Step: uint32(r)}
							sends = append(sends, tr.Send(peer, tag, desc, split(pattern(r, peer, n), i)...))
						}
					}
					post(true)
					for _, s := range sends {
						if err := s.Wait(ctx); err != nil {
							errc <- fmt.Errorf("rank %d %v: %w", r, s, err)
						}
					}
					for i, rq := range recvs {
						if err := rq.Wait(ctx); err != nil {
							errc <- fmt.Errorf("rank %d %v: %w", r, rq, err)
							continue
						}
						if !bytes.Equal(rq.Data(), want[i]) {
							errc <- fmt.Errorf("rank %d %v: %d bytes differ from the %d sent", r, rq, len(rq.Data()), len(want[i]))
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			failed := false
			for err := range errc {
				t.Error(err)
				failed = true
			}
			if failed {
				for _, tr := range ts {
					t.Log(tr.debugState())
				}
			}
			for _, tr := range ts {
				require.NoError(t, tr.Err())
				posted, unexp := tr.m.Pending()
				require.Zero(t, posted+unexp, "rank %d leaves receives or messages behind", tr.rank)
			}
		})
	}
}

// TestCreditFlowControl floods a peer that receives late: the sender runs
// out of ring slots, queues, and continues as credits come back.
func TestCreditFlowControl(t *testing.T) {
	ts := startRanks(t, 2, func(c *Config) { c.Slots = 4 })
	ctx := waitCtx(t)
	const N = 500
	var sends []*transport.Request
	for i := range N {
		sends = append(sends, ts[0].Send(1, transport.Tag{Comm: 2, Seq: uint64(i)}, desc, pattern(0, 1, 100+i)))
	}
	// Both directions at once as well.
	var back []*transport.Request
	for i := range N {
		back = append(back, ts[1].Send(0, transport.Tag{Comm: 3, Seq: uint64(i)}, desc, pattern(1, 0, i)))
	}
	for i := range N {
		rq := ts[1].Recv(0, transport.Tag{Comm: 2, Seq: uint64(i)}, desc, nil)
		require.NoError(t, rq.Wait(ctx))
		require.True(t, bytes.Equal(pattern(0, 1, 100+i), rq.Data()), "message %d", i)
		rq = ts[0].Recv(1, transport.Tag{Comm: 3, Seq: uint64(i)}, desc, nil)
		require.NoError(t, rq.Wait(ctx))
		require.True(t, bytes.Equal(pattern(1, 0, i), rq.Data()), "message %d back", i)
	}
	for _, s := range append(sends, back...) {
		require.NoError(t, s.Wait(ctx))
	}
	st := ts[0].Stats()
	require.Equal(t, uint64(N), st.MsgsSent)
	require.Equal(t, uint64(N), st.MsgsRecv)
}

// TestRendezvousZeroCopy checks that a large message lands in the posted
// buffer itself and that the buffer's registration is reused.
func TestRendezvousZeroCopy(t *testing.T) {
	ts := startRanks(t, 2, nil)
	ctx := waitCtx(t)
	buf := make([]byte, 1<<20)
	src := pattern(0, 1, len(buf))
	for i := range 5 {
		tag := transport.Tag{Comm: 4, Seq: uint64(i)}
		rq := ts[1].Recv(0, tag, desc, buf)
		require.NoError(t, ts[0].Send(1, tag, desc, src).Wait(ctx))
		require.NoError(t, rq.Wait(ctx))
		require.Same(t, &buf[0], &rq.Data()[0], "payload not in the caller's buffer")
		require.Equal(t, src, rq.Data())
	}
	cs := ts[1].CacheStats()
	require.Equal(t, 1, cs.Misses, "receive buffer registered more than once: %+v", cs)
	require.Equal(t, 4, cs.Hits)
}

// TestMismatchAndFailOp: differing descriptors fail the receive on both
// paths; FailOp fails a peer's pending receive and the transport stays
// usable.
func TestMismatchAndFailOp(t *testing.T) {
	ts := startRanks(t, 2, nil)
	ctx := waitCtx(t)
	other := desc
	other.Count = 99
	for i, n := range []int{16, 1 << 20} {
		tag := transport.Tag{Comm: 5, Seq: uint64(i)}
		rq := ts[1].Recv(0, tag, desc, make([]byte, n))
		sq := ts[0].Send(1, tag, other, make([]byte, n))
		require.NoError(t, sq.Wait(ctx), "the sender's side completes, as on TCP")
		var me *transport.MismatchError
		require.ErrorAs(t, rq.Wait(ctx), &me)
	}

	tag := transport.Tag{Comm: 6, Seq: 1}
	rq := ts[0].Recv(1, tag, desc, nil)
	ts[1].FailOp(6, 1, errors.New("bad input on rank 1"))
	err := rq.Wait(ctx)
	require.ErrorIs(t, err, transport.ErrAborted)
	require.ErrorContains(t, err, "bad input on rank 1")
	// A large send to the failed op is dropped by the receiver, not hung.
	require.NoError(t, ts[0].Send(1, tag, desc, make([]byte, 1<<20)).Wait(ctx))

	// Other operations still work.
	tag = transport.Tag{Comm: 6, Seq: 2}
	rq = ts[1].Recv(0, tag, desc, nil)
	require.NoError(t, ts[0].Send(1, tag, desc, []byte("still alive")).Wait(ctx))
	require.NoError(t, rq.Wait(ctx))
	require.Equal(t, "still alive", string(rq.Data()))
	require.NoError(t, ts[0].Err())
	require.NoError(t, ts[1].Err())
}

// TestAbortPeerLost: a rank aborts; the others' pending operations fail
// with ErrPeerLost naming it, and their transports stay failed.
func TestAbortPeerLost(t *testing.T) {
	ts := startRanks(t, 3, nil)
	ctx := waitCtx(t)
	r0 := ts[0].Recv(2, transport.Tag{Comm: 7}, desc, nil)
	r1 := ts[1].Recv(2, transport.Tag{Comm: 7}, desc, make([]byte, 1<<20))
	big := ts[1].Send(0, transport.Tag{Comm: 8}, desc, make([]byte, 1<<20)) // waits for rank 0's receive
	start := time.Now()
	ts[2].Abort(errors.New("killed by test"))
	for _, rq := range []*transport.Request{r0, r1, big} {
		err := rq.Wait(ctx)
		require.ErrorIs(t, err, transport.ErrPeerLost)
		var pe *transport.PeerError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, 2, pe.Peer)
	}
	t.Logf("peers noticed the abort in %v", time.Since(start))
	for _, tr := range ts[:2] {
		require.ErrorIs(t, tr.Err(), transport.ErrPeerLost)
		require.ErrorIs(t, tr.Send(2, transport.Tag{Comm: 9}, desc, []byte("x")).Wait(ctx), transport.ErrPeerLost)
	}
	require.ErrorIs(t, ts[2].Err(), transport.ErrAborted)
}

// TestSilentPeerDeath: a rank's queue pairs die without a goodbye (as when
// the process is killed); a rank that only receives notices it through
// its keep-alive writes.
func TestSilentPeerDeath(t *testing.T) {
	ts := startRanks(t, 2, func(c *Config) { c.KeepAlive = 200 * time.Millisecond })
	ctx := waitCtx(t)
	rq := ts[0].Recv(1, transport.Tag{Comm: 10}, desc, nil)
	start := time.Now()
	// Destroy rank 1's queue pair behind its back.
	ts[1].stop.Store(true)
	ts[1].wake()
	<-ts[1].done
	ts[1].peers[0].qp.Close()
	err := rq.Wait(ctx)
	require.ErrorIs(t, err, transport.ErrPeerLost)
	t.Logf("silent death noticed in %v: %v", time.Since(start), err)
}

// TestClose: pending requests fail with ErrClosed; Close is idempotent.
func TestClose(t *testing.T) {
	ts := startRanks(t, 2, nil)
	ctx := waitCtx(t)
	rq := ts[0].Recv(1, transport.Tag{Comm: 11}, desc, nil)
	require.NoError(t, ts[0].Close())
	require.NoError(t, ts[0].Close())
	require.ErrorIs(t, rq.Wait(ctx), transport.ErrClosed)
	require.ErrorIs(t, ts[0].Send(1, transport.Tag{Comm: 11}, desc, nil).Wait(ctx), transport.ErrClosed)
	require.ErrorIs(t, ts[0].Recv(1, transport.Tag{Comm: 12}, desc, nil).Wait(ctx), transport.ErrClosed)
}

// BenchmarkPingPong measures round trips between two ranks; half the
// round trip is the one-way latency perftest's ib_write_lat reports.
func BenchmarkPingPong(b *testing.B) {
	for _, n := range []int{8, 4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			ts := startRanks(b, 2, nil)
			ctx := waitCtx(b)
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(2 * n))
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					tag := transport.Tag{Comm: 1, Seq: uint64(i)}
					if ts[1].Recv(0, tag, desc, dst).Wait(ctx) != nil {
						return
					}
					ts[1].Send(0, tag, desc, dst).Wait(ctx)
				}
			}()
			for i := 0; i < b.N; i++ {
				tag := transport.Tag{Comm: 1, Seq: uint64(i)}
				rq := ts[0].Recv(1, tag, desc, src)
				if err := ts[0].Send(1, tag, desc, src).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if err := rq.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "us/half-rtt")
		})
	}
}

// BenchmarkStream measures one-way bandwidth with a window of 16
// messages in flight, like ib_write_bw.
func BenchmarkStream(b *testing.B) {
	const window = 16
	for _, n := range []int{4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			ts := startRanks(b, 2, nil)
			ctx := waitCtx(b)
			src := make([]byte, n)
			dst := make([][]byte, window)
			for i := range dst {
				dst[i] = make([]byte, n)
			}
			b.SetBytes(int64(n))
			b.ResetTimer()
			done := make(chan error, 1)
			go func() {
				var rqs []*transport.Request
				for i := 0; i < b.N; i++ {
					rqs = append(rqs, ts[1].Recv(0, transport.Tag{Comm: 2, Seq: uint64(i)}, desc, dst[i%window]))
					if len(rqs) == window {
						for _, r := range rqs {
							if err := r.Wait(ctx); err != nil {
								done <- err
								return
							}
						}
						rqs = rqs[:0]
					}
				}
				for _, r := range rqs {
					if err := r.Wait(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			var sqs []*transport.Request
			for i := 0; i < b.N; i++ {
				sqs = append(sqs, ts[0].Send(1, transport.Tag{Comm: 2, Seq: uint64(i)}, desc, src))
				if len(sqs) == window {
					for _, s := range sqs {
						if err := s.Wait(ctx); err != nil {
							b.Fatal(err)
						}
					}
					sqs = sqs[:0]
				}
			}
			for _, s := range sqs {
				if err := s.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkGoroutinePingPong is the scheduling floor: two goroutines
// bouncing a token over channels, as a receive completion wakes a waiter.
func BenchmarkGoroutinePingPong(b *testing.B) {
	ping, pong := make(chan struct{}), make(chan struct{})
	go func() {
		for range ping {
			pong <- struct{}{}
		}
	}()
	for i := 0; i < b.N; i++ {
		ping <- struct{}{}
		<-pong
	}
	close(ping)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "us/half-rtt")
}

// debugState describes what a transport is waiting for, for failed tests.
func (t *Transport) debugState() string {
	t.mu.Lock()
	s := fmt.Sprintf("rank %d: err=%v posted=%d pendingRTS=%d sends=%d recvs=%d", t.rank, t.err,
		len(t.posted), len(t.pendingRTS), len(t.sends), len(t.recvs))
	for id, rs := range t.sends {
		s += fmt.Sprintf(" [send %d to %d: %d bytes, %d wrs]", id, rs.peer, rs.n, len(rs.wrs))
	}
	t.mu.Unlock()
	for _, p := range t.peers {
		if p != nil {
			p.mu.Lock()
			s += fmt.Sprintf("; peer %d credits=%d sqFree=%d queue=%d freed=%d", p.rank, p.credits, p.sqFree, len(p.queue), p.freed)
			p.mu.Unlock()
		}
	}
	posted, unexp := t.m.Pending()
	return s + fmt.Sprintf("; matcher posted=%d unexpected=%d", posted, unexp)
}

// TestAdvertise covers receiver-advertised rendezvous: a large receive
// posted before its send offers its buffer, and every way the offer can
// end: used (same size and descriptor), refused (other size: smaller,
// larger, or another descriptor), overtaken by an eager message, and
// revoked because the receiver's operation failed. No receive completes
// while the sender may still write into its buffer.
func TestAdvertise(t *testing.T) {
	ts := startRanks(t, 2, nil)
	ctx := waitCtx(t)
	// offered waits until rank 0 holds rank 1's offer for tag.
	offered := func(tag transport.Tag) {
		t.Helper()
		require.Eventually(t, func() bool {
			ts[0].mu.Lock()
			defer ts[0].mu.Unlock()
			_, ok := ts[0].advs[mkey{1, tag}]
			return ok
		}, testDeadline, time.Millisecond, "no offer for %v: %s", tag, ts[0].debugState())
	}
	const post = 64 << 10
	other := desc
	other.Count = 99
	for i, c := range []struct {
		name string
		n    int
		d    transport.Desc
	}{{"same size", post, desc}, {"smaller", 20000, desc}, {"larger", 100000, desc},
		{"eager", 100, desc}, {"mismatch", post, other}} {
		tag := transport.Tag{Comm: 20, Seq: uint64(i)}
		buf := make([]byte, post)
		rq := ts[1].Recv(0, tag, desc, buf)
		offered(tag)
		src := pattern(0, 1, c.n)
		require.NoError(t, ts[0].Send(1, tag, c.d, src).Wait(ctx), c.name)
		err := rq.Wait(ctx)
		if c.d != desc {
			var me *transport.MismatchError
			require.ErrorAs(t, err, &me, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.True(t, bytes.Equal(src, rq.Data()), c.name)
	}

	// The receiver's operation fails before anything is sent: the offer
	// is revoked and only then does the receive fail.
	tag := transport.Tag{Comm: 21, Seq: 1}
	rq := ts[1].Recv(0, tag, desc, make([]byte, post))
	offered(tag)
	ts[1].FailOp(21, 1, errors.New("bad input on rank 1"))
	require.ErrorContains(t, rq.Wait(ctx), "bad input on rank 1")

	// Nothing is left behind on either side.
	for _, tr := range ts {
		require.Eventually(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.adverts) == 0 && len(tr.advs) == 0 && len(tr.sendTags) == 0 && len(tr.recvs) == 0 && len(tr.sends) == 0
		}, testDeadline, time.Millisecond, tr.debugState())
		require.NoError(t, tr.Err())
	}

	// Crossed offers and RTS, both directions, many at once.
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				tag := transport.Tag{Comm: 22, Seq: uint64(i)}
				n := post + i*1000
				rq := ts[r].Recv(1-r, tag, desc, make([]byte, n))
				src := pattern(r, 1-r, n)
				sq := ts[r].Send(1-r, tag, desc, src)
				if err := sq.Wait(ctx); err != nil {
					t.Errorf("rank %d send %d: %v", r, i, err)
					return
				}
				if err := rq.Wait(ctx); err != nil || !bytes.Equal(pattern(1-r, r, n), rq.Data()) {
					t.Errorf("rank %d receive %d: %v (or wrong data)", r, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
