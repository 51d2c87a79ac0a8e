package fallback

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// rawPeer connects to rank `to` of the job behind store the way a rank
// does, without a Transport: a stand-in for a buggy or hostile peer.
type rawPeer struct {
	nc net.Conn
}

func dialRaw(ctx context.Context, store bootstrap.Store, to int) (*rawPeer, error) {
	addr, err := store.Get(ctx, addrKey(to))
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		return nil, err
	}
	return &rawPeer{nc: nc}, nil
}

// join authenticates with token and exchanges hellos, announcing h.
func (p *rawPeer) join(token []byte, h hello) (hello, error) {
	deadline := time.Now().Add(5 * time.Second)
	if err := bootstrap.Authenticate(p.nc, token, true, deadline); err != nil {
		return hello{}, err
	}
	if err := writeHello(p.nc, h, deadline); err != nil {
		return hello{}, err
	}
	return readHello(p.nc, deadline)
}

// TestStrangersRefused: connections with a wrong token, a bad hello or
// none at all are refused and logged, and the job sets up and works.
func TestStrangersRefused(t *testing.T) {
	checkNoLeaks(t)
	const size = 3
	j := &job{store: bootstrap.NewMemStore(), log: &logBuffer{}, ts: make([]*Transport, size)}
	t.Cleanup(j.close)
	ctx := waitCtx(t)
	errs := make([]error, size)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.ts[r], errs[r] = New(ctx, j.config(r, size, nil))
		}()
	}
	// Ranks 0 and 1 start; rank 0 keeps listening for rank 2.
	start(0)
	start(1)

	wrongToken, err := dialRaw(ctx, j.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wrongToken.nc.Close()
	if _, err := wrongToken.join([]byte("not the job secret"), hello{rank: 2, size: size, conn: 0, connsPerPeer: 1}); !errors.Is(err, bootstrap.ErrAuth) {
		t.Fatalf("joining with a wrong token: %v, want ErrAuth", err)
	}

	badHello, err := dialRaw(ctx, j.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer badHello.nc.Close()
	if _, err := badHello.join(testToken, hello{rank: 2, size: size + 1, conn: 0, connsPerPeer: 1}); err == nil {
		t.Fatal("a hello with the wrong job size was accepted")
	}

	lowRank, err := dialRaw(ctx, j.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lowRank.nc.Close()
	if _, err := lowRank.join(testToken, hello{rank: 0, size: size, conn: 0, connsPerPeer: 1}); err == nil {
		t.Fatal("a hello from rank 0 to rank 0 was accepted")
	}

	// A silent stranger must not hold up the mesh.
	silent, err := dialRaw(ctx, j.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.nc.Close()

	start(2)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	for _, want := range []string{"authentication failed", "job has 4 ranks", "only ranks 1..2 connect"} {
		if !j.log.contains(want) {
			t.Errorf("log does not mention %q:\n%s", want, j.log)
		}
	}
	exchangeAllPairs(t, j, 1, 2)

	// The mesh is complete: the listener is closed.
	addr, err := j.store.Get(ctx, addrKey(0))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := net.DialTimeout("tcp", string(addr), time.Second); err == nil {
		nc.Close()
		t.Errorf("rank 0 still accepts connections at %s after setup", addr)
	}
}

// TestSetupTimeout: a missing rank makes New fail when ctx ends, naming
// what it was waiting for.
func TestSetupTimeout(t *testing.T) {
	checkNoLeaks(t)
	store := bootstrap.NewMemStore()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := New(ctx, Config{Rank: 0, Size: 2, Store: store, Token: testToken})
	if err == nil || !strings.Contains(err.Error(), "waiting for connections from rank 1:") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("rank 0 alone: New = %v, want a deadline error naming rank 1", err)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err = New(ctx2, Config{Rank: 1, Size: 3, Store: bootstrap.NewMemStore(), Token: testToken})
	if err == nil || !strings.Contains(err.Error(), "address of rank 0") {
		t.Errorf("rank 1 alone: New = %v, want an error naming rank 0", err)
	}
}

// TestSetupDisagreement: ranks configured with different connection counts
// fail to set up, with an error, instead of mixing protocols.
func TestSetupDisagreement(t *testing.T) {
	checkNoLeaks(t)
	store := bootstrap.NewMemStore()
	defer store.Close()
	log := &logBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, err := New(ctx, Config{Rank: r, Size: 2, Store: store, Token: testToken, ConnsPerPeer: 1 + r, Log: log.logger()})
			if err == nil {
				tr.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("New succeeded with different ConnsPerPeer: %v", errs)
	}
	if !strings.Contains(errs[1].Error(), "connect to rank 0") || !strings.Contains(errs[1].Error(), "refused the connection") {
		t.Errorf("rank 1: %v, want it to say rank 0 refused", errs[1])
	}
	if !log.contains("connections per peer") {
		t.Errorf("rank 0 did not log why it refused:\n%s", log)
	}
}

// frameBytes encodes one frame with payload.
func frameBytes(h wire.Header, payload []byte) []byte {
	h.Length = uint64(len(payload))
	b := make([]byte, wire.HeaderSize, wire.HeaderSize+len(payload))
	wire.EncodeHeader(b, &h)
	return append(b, payload...)
}

// TestMalformedFrames: a peer that passes authentication and then sends
// garbage makes the transport fail with ErrProtocol naming that peer; no
// panic, no hang.
func TestMalformedFrames(t *testing.T) {
	data := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 99}, Desc: testDesc}
	corrupt := func(off int, v byte) []byte {
		b := frameBytes(data, []byte("abc"))
		b[off] = v
		return b
	}
	oversized := frameBytes(data, nil)
	binary.LittleEndian.PutUint64(oversized[wire.HeaderSize-8:], 1<<40) // the length ends the header
	longReason := frameBytes(wire.Header{Kind: wire.FailOp}, nil)
	binary.LittleEndian.PutUint64(longReason[wire.HeaderSize-8:], wire.MaxReasonLen+1)
	cases := map[string][]byte{
		"bad magic":     corrupt(0, 'X'),
		"wrong version": corrupt(4, wire.Version+1),
		"unknown kind":  corrupt(5, 77),
		"reserved bits": corrupt(6, 1),
		"oversized":     oversized,
		"long fail-op":  longReason,
		"long goodbye":  frameBytes(wire.Header{Kind: wire.Goodbye}, make([]byte, wire.MaxReasonLen+1)),
		"short failure": frameBytes(wire.Header{Kind: wire.FailOp}, []byte("why")),
		"failure of rank 9": frameBytes(wire.Header{Kind: wire.FailOp},
			transport.AppendFailure(nil, &transport.RemoteFailure{Peer: 9, Code: transport.CodeMismatch, Reason: "why"})),
		"data after goodbye": append(frameBytes(wire.Header{Kind: wire.Goodbye}, nil), frameBytes(data, nil)...),
		"duplicate tag":      append(frameBytes(data, []byte("a")), frameBytes(data, []byte("b"))...),
	}
	for name, garbage := range cases {
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t)
			log := &logBuffer{}
			tr, fake := withFakePeer(t, func(c *Config) { c.MaxMessage, c.Log = 1<<20, log.logger() })
			ctx := waitCtx(t)
			pending := tr.Recv(1, transport.Tag{Comm: 2, Seq: 1}, testDesc, nil)
			if _, err := fake.Write(garbage); err != nil {
				t.Fatal(err)
			}
			err := pending.Wait(ctx)
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Peer != 1 || pe.Kind != transport.ErrProtocol {
				t.Fatalf("pending receive: %v, want a protocol PeerError naming rank 1", err)
			}
			if !errors.Is(tr.Err(), transport.ErrProtocol) {
				t.Fatalf("Err() = %v, want ErrProtocol", tr.Err())
			}
			if !log.contains("protocol error from rank 1") {
				t.Errorf("not logged:\n%s", log)
			}
			t.Logf("%v", err)
		})
	}
}

// TestConnectError: a rank whose published address does not answer is
// named in the error, with the address.
func TestConnectError(t *testing.T) {
	checkNoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more
	store := bootstrap.NewMemStore()
	defer store.Close()
	ctx := waitCtx(t)
	if err := store.Set(ctx, addrKey(0), []byte(dead)); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, Config{Rank: 1, Size: 2, Store: store, Token: testToken})
	want := "tcp: rank 1: connect to rank 0 at " + dead
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("New = %v, want an error containing %q", err, want)
	}
	t.Log(err)
}

// withFakePeer starts rank 0 of a two-rank job (its Config changed by mod,
// if not nil) whose rank 1 is the test itself, authenticated and then
// writing raw bytes on the connection.
func withFakePeer(t *testing.T, mod func(*Config)) (*Transport, net.Conn) {
	t.Helper()
	store := bootstrap.NewMemStore()
	t.Cleanup(func() { store.Close() })
	ctx := waitCtx(t)
	cfg := Config{Rank: 0, Size: 2, Store: store, Token: testToken}
	if mod != nil {
		mod(&cfg)
	}
	type result struct {
		tr  *Transport
		err error
	}
	started := make(chan result, 1)
	go func() {
		tr, err := New(ctx, cfg)
		started <- result{tr, err}
	}()
	fake, err := dialRaw(ctx, store, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.nc.Close() })
	theirs, err := fake.join(testToken, hello{rank: 1, size: 2, conn: 0, connsPerPeer: 1})
	if err != nil {
		t.Fatalf("fake rank 1 could not join: %v", err)
	}
	if theirs.rank != 0 || theirs.size != 2 {
		t.Fatalf("hello from rank 0: %+v", theirs)
	}
	res := <-started
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Cleanup(func() { res.tr.Close() })
	return res.tr, fake.nc
}
