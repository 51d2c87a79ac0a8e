//go:build linux

package sparcml

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/internal/startup"
	"github.com/sparcml/sparcml/internal/topology"
	"github.com/sparcml/sparcml/transport"
)

// connectAll runs startup.ConnectTransport for every rank of topo in this
// process, as Init would on hosts laid out as topo says.
func connectAll(t *testing.T, topo topology.Topology, mode string) ([]transport.Transport, []error) {
	t.Helper()
	size := len(topo.HostOf)
	s, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	store := bootstrap.NewMemStore()
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]transport.Transport, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := bootstrap.Env{Rank: r, Size: size, Token: []byte("mixed-test")}
			log := logging.New(logging.PrintfSink(t.Logf), logging.Info, logging.Init).WithRank(r)
			ts[r], errs[r] = startup.ConnectTransport(ctx, startup.Options{Transport: mode}, s, env, store, topo, log)
		}()
	}
	wg.Wait()
	return ts, errs
}

// Four ranks laid out as two hosts of two: auto reaches the host's other
// rank through shared memory and the other host's over TCP; an allreduce
// over them is the sum of every rank's input, and each transport's
// counters show what it carried.
func TestConnectTransportMixed(t *testing.T) {
	topo := topology.New([]int{0, 0, 1, 1})
	ts, errs := connectAll(t, topo, "auto")
	comms := make([]*Comm, len(ts))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		comms[r] = newComm(ts[r], time.Minute, logging.New(logging.PrintfSink(t.Logf), logging.Warn, logging.All))
		comms[r].topo = topo
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			tr.Close()
		}
	})
	const n = 100000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outs := make([][]float32, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r*n + i%7)
			}
			errs[r] = Allreduce(ctx, c, v, Sum)
			outs[r] = v
		}()
	}
	wg.Wait()
	for r, c := range comms {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, x := range outs[r] {
			if want := float32(6*n + 4*(i%7)); x != want {
				t.Fatalf("rank %d: element %d is %v, want %v", r, i, x, want)
			}
		}
		if c.Transport() != "shm+tcp" || c.TransportOf(r^1) != "shm" || c.TransportOf(r^2) != "tcp" || c.TransportOf(r) != "" {
			t.Errorf("rank %d: transport %s, to rank %d %s, to rank %d %s", r, c.Transport(), r^1, c.TransportOf(r^1), r^2, c.TransportOf(r^2))
		}
		by := c.StatsByTransport()
		if by["shm"].BytesSent == 0 || by["tcp"].BytesSent == 0 || by["shm"].BytesSent+by["tcp"].BytesSent != c.Stats().BytesSent {
			t.Errorf("rank %d: counters by transport %+v, total %+v", r, by, c.Stats())
		}
	}
}

// shm across two hosts is refused on every rank, naming the hosts.
func TestConnectTransportShmNeedsOneHost(t *testing.T) {
	_, errs := connectAll(t, topology.New([]int{0, 0, 1}), "shm")
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "WithTransport=shm needs every rank on one host, but the job runs on 2: host 0: ranks 0-1; host 1: rank 2") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
