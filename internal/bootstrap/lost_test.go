package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// waitGets starts a Get of a key nobody sets on each store and returns
// where their errors arrive.
func waitGets(t *testing.T, stores []Store) chan error {
	errs := make(chan error, len(stores))
	ctx := testContext(t, 20*time.Second)
	for _, st := range stores {
		go func() {
			_, err := st.Get(ctx, "never")
			errs <- err
		}()
	}
	return errs
}

// wantLaunchError checks that n errors from errs are the launch's failure
// naming cause, a lost peer's (transport.CodePeerLost), within bound of
// start.
func wantLaunchError(t *testing.T, errs chan error, n int, cause string, start time.Time, bound time.Duration) {
	t.Helper()
	for range n {
		select {
		case err := <-errs:
			if le, ok := asLaunchError(err); !ok || le.Cause != cause || le.Code != transport.CodePeerLost {
				t.Fatalf("waiting Get = %v, want the launch's failure %q with code %v", err, cause, transport.CodePeerLost)
			}
		case <-time.After(bound + time.Second):
			t.Fatalf("a waiting Get did not fail within %v", bound+time.Second)
		}
	}
	if el := time.Since(start); el > bound {
		t.Errorf("the waiting ranks failed %v after the death, want within %v", el, bound)
	}
}

// A rank whose connection ends without a goodbye during Init fails the
// launch after reconnectGrace, naming it, on every rank waiting on the
// store; a rank that comes later is refused with the same cause.
func TestLostRankDuringInitFailsLaunch(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	_, addr := testServer(t, 5, "tok", &logs)
	var stores []Store
	for r := range 4 {
		stores = append(stores, mustDial(t, ctx, testEnv(addr, r, 5, "tok"), &logs))
	}
	errs := waitGets(t, []Store{stores[0], stores[1], stores[3]})
	time.Sleep(50 * time.Millisecond) // the Gets are waiting
	start := time.Now()
	die(stores[2])
	cause := lostCause(2)
	wantLaunchError(t, errs, 3, cause, start, reconnectGrace+500*time.Millisecond)
	if time.Since(start) < reconnectGrace-100*time.Millisecond {
		t.Errorf("the launch failed %v after the loss, before the grace of %v", time.Since(start), reconnectGrace)
	}
	_, err := dialStore(ctx, testEnv(addr, 4, 5, "tok"), 99, nil)
	if le, ok := asLaunchError(err); !ok || le.Cause != cause {
		t.Errorf("a rank after the failure = %v, want %q", err, cause)
	}
}

// A peer whose transport lost the dead rank reports it: the launch fails
// at once, naming the dead rank, and the reporter gets that cause too.
func TestPeerReportNamesTheDeadRank(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	_, addr := testServer(t, 4, "tok", &logs)
	var stores []Store
	for r := range 4 {
		stores = append(stores, mustDial(t, ctx, testEnv(addr, r, 4, "tok"), &logs))
	}
	errs := waitGets(t, []Store{stores[0], stores[1]})
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	die(stores[2])
	lost := &transport.PeerError{Peer: 2, Kind: transport.ErrPeerLost, Err: errors.New("shm: reading hello: EOF")}
	le := ReportInitFailure(stores[3], fmt.Errorf("shm: rank 3: connecting to rank 2: %w", lost))
	cause := lostCause(2)
	if le == nil || le.Cause != cause || le.Code != transport.CodePeerLost {
		t.Fatalf("the reporter's cause = %+v, want %q with code %v", le, cause, transport.CodePeerLost)
	}
	wantLaunchError(t, errs, 2, cause, start, reconnectGrace/2)
}

// A report naming a rank whose store connection stays up is the
// reporter's own failure after the grace: that rank is not dead.
func TestPeerReportOfLiveRank(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	_, addr := testServer(t, 3, "tok", &logs)
	var stores []Store
	for r := range 3 {
		stores = append(stores, mustDial(t, ctx, testEnv(addr, r, 3, "tok"), &logs))
	}
	errs := waitGets(t, stores[:2])
	lost := &transport.PeerError{Peer: 1, Kind: transport.ErrPeerLost, Err: errors.New("connection refused")}
	if le := ReportInitFailure(stores[2], lost); le != nil {
		t.Fatalf("the reporter's own failure came back as %v", le)
	}
	for range 2 {
		err := <-errs
		if le, ok := asLaunchError(err); !ok || !strings.HasPrefix(le.Cause, "rank 2 failed Init: rank 1 peer lost") {
			t.Fatalf("waiting Get = %v, want rank 2's failure", err)
		}
	}
}

// AwaitReady returns once every rank is ready, not before; a rank ready
// may then leave without failing the launch: its peers see that on
// their own connections.
func TestReadyRankLeavesWithoutFault(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	s, addr := testServer(t, 2, "tok", &logs)
	zero := mustDial(t, ctx, testEnv(addr, 0, 2, "tok"), &logs)
	one := mustDial(t, ctx, testEnv(addr, 1, 2, "tok"), &logs)
	oneReady := make(chan error, 1)
	go func() { oneReady <- AwaitReady(ctx, one) }()
	select {
	case err := <-oneReady:
		t.Fatalf("AwaitReady returned before rank 0 was ready: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := AwaitReady(ctx, zero); err != nil {
		t.Fatal(err)
	}
	if err := <-oneReady; err != nil {
		t.Fatal(err)
	}
	if err := one.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	die(one)
	time.Sleep(reconnectGrace + 300*time.Millisecond)
	if f := s.faultCause(); f != "" {
		t.Fatalf("the launch failed: %s", f)
	}
	if v, err := zero.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

// A live rank whose store connection drops (on its side, or reset on the
// store's) reconnects within the grace: its waiting Get is answered, the
// launch does not fail, and the store goes on serving it.
func TestReconnectWithinGrace(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			ctx := testContext(t, 20*time.Second)
			var logs logBuffer
			s, addr := testServer(t, 3, "tok", &logs)
			zero := mustDial(t, ctx, testEnv(addr, 0, 3, "tok"), &logs)
			one := mustDial(t, ctx, testEnv(addr, 1, 3, "tok"), &logs)
			two := mustDial(t, ctx, testEnv(addr, 2, 3, "tok"), &logs)
			got := make(chan string, 1)
			go func() {
				v, err := one.Get(ctx, "k")
				got <- fmt.Sprintf("%s %v", v, err)
			}()
			time.Sleep(50 * time.Millisecond)
			if side == "client" {
				one.(*client).mu.Lock()
				conn := one.(*client).conn
				one.(*client).mu.Unlock()
				conn.Close()
			} else {
				s.mu.Lock()
				conn := s.ranks[1].conn
				s.mu.Unlock()
				conn.(interface{ SetLinger(int) error }).SetLinger(0) // a reset
				conn.Close()
			}
			waitFor(t, 5*time.Second, "rank 1 to reconnect", func() bool { return logs.contains("reconnected in") })
			if err := two.Set(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if g := <-got; g != "v <nil>" {
				t.Fatalf("rank 1's Get across the reconnect = %s", g)
			}
			time.Sleep(reconnectGrace + 300*time.Millisecond)
			if f := s.faultCause(); f != "" {
				t.Fatalf("the launch failed: %s", f)
			}
			if err := one.Set(ctx, "k1", []byte("w")); err != nil {
				t.Fatal(err)
			}
			if v, err := zero.Get(ctx, "k1"); err != nil || string(v) != "w" {
				t.Fatalf("Get = %q, %v", v, err)
			}
			for _, st := range []Store{one, two, zero} {
				if err := st.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// BenchmarkStoreReconnect measures how long a live client takes to be
// back in the store after the store resets its connection: the figure
// behind reconnectGrace (docs/RELIABILITY.md). max-ms is the slowest.
func BenchmarkStoreReconnect(b *testing.B) {
	ctx := testContext(b, 10*time.Minute)
	var logs logBuffer
	s, addr := testServer(b, 2, "tok", &logs)
	one := mustDial(b, ctx, testEnv(addr, 1, 2, "tok"), &logs)
	defer one.Close()
	var worst time.Duration
	for b.Loop() {
		s.mu.Lock()
		old := s.ranks[1]
		s.mu.Unlock()
		start := time.Now()
		old.conn.(interface{ SetLinger(int) error }).SetLinger(0)
		old.conn.Close()
		for {
			s.mu.Lock()
			back := s.ranks[1] != nil && s.ranks[1] != old
			s.mu.Unlock()
			if back {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(worst)/1e6, "max-ms")
}

// A rank killed in the middle of its handshake (after its claim) fails
// the launch too, unless it connects within the grace.
func TestKilledDuringHandshakeFailsLaunch(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	_, addr := testServer(t, 3, "tok", &logs)
	stores := []Store{mustDial(t, ctx, testEnv(addr, 0, 3, "tok"), &logs), mustDial(t, ctx, testEnv(addr, 1, 3, "tok"), &logs)}
	errs := waitGets(t, stores)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(encodeClaim(2))
	start := time.Now()
	conn.Close()
	wantLaunchError(t, errs, 2, lostCause(2), start, reconnectGrace+500*time.Millisecond)
}

// With rank 0 gone (its store with it), a rank whose set-up lost a peer
// names the store's loss, which is the cause, not the peer.
func TestPeerReportAfterStoreLost(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	s, addr := testServer(t, 3, "tok", &logs)
	two := mustDial(t, ctx, testEnv(addr, 2, 3, "tok"), &logs)
	s.stop()
	lost := &transport.PeerError{Peer: 1, Kind: transport.ErrPeerLost, Err: errors.New("connection refused")}
	le := ReportInitFailure(two, lost)
	if le == nil || !strings.Contains(le.Cause, "connection to rank 0's rendezvous store lost") || le.Code != transport.CodePeerLost {
		t.Fatalf("cause = %+v, want the store's loss (code %v)", le, transport.CodePeerLost)
	}
}

// A rank waiting for the others' set-up (AwaitReady) hears of a death
// during another's as the launch's failure naming the dead rank.
func TestAwaitReadyNamesADeathDuringSetUp(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	var logs logBuffer
	_, addr := testServer(t, 3, "tok", &logs)
	var stores []Store
	for r := range 3 {
		stores = append(stores, mustDial(t, ctx, testEnv(addr, r, 3, "tok"), &logs))
	}
	errs := make(chan error, 2)
	for _, st := range stores[:2] {
		go func() { errs <- AwaitReady(ctx, st) }()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	die(stores[2])
	wantLaunchError(t, errs, 2, lostCause(2), start, reconnectGrace+500*time.Millisecond)
}
