package sim_test

import (
	"math"
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/sim"
)

const (
	lat  = 2e-6
	rate = 1e9 // bytes/s: 1 ns per byte
	size = 1 << 20
)

var p2p = transport.Desc{Kind: transport.OpP2P}

// sendAll runs a job in which every rank sends size bytes to dst(rank)
// (none when -1) and receives what is sent to it, and returns the time
// the last rank finished and the busiest link.
func sendAll(t *testing.T, cfg sim.Config, dst func(rank int) int) (float64, sim.Link) {
	t.Helper()
	w, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, cfg.Ranks)
	ends, err := w.Run(func(tr *sim.Transport) {
		r := tr.Rank()
		var reqs []*transport.Request
		for src := range cfg.Ranks {
			if src != r && dst(src) == r {
				reqs = append(reqs, tr.Recv(src, transport.Tag{Comm: 1, Seq: 1}, p2p, make([]byte, size)))
			}
		}
		if d := dst(r); d >= 0 {
			reqs = append(reqs, tr.Send(d, transport.Tag{Comm: 1, Seq: 1}, p2p, make([]byte, size)))
		}
		for _, q := range reqs {
			if err := q.Wait(t.Context()); err != nil {
				errs[r] = err
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var end float64
	for r, e := range errs {
		if e != nil {
			t.Fatalf("rank %d: %v", r, e)
		}
		end = max(end, ends[r])
	}
	return end, w.Busiest()
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }

// TestIncast: P-1 ranks send to rank 0 at once; its ingress serialises
// them: L + (P-1)·n·G.
func TestIncast(t *testing.T) {
	cfg := sim.Config{Ranks: 9, Rate: rate, Latency: lat, Compute: sim.Compute{Mode: sim.ComputeNone}}
	end, busiest := sendAll(t, cfg, func(r int) int {
		if r == 0 {
			return -1
		}
		return 0
	})
	if want := lat + 8*size/rate; !near(end, want) {
		t.Errorf("incast of 8: %.6g us, want %.6g us", end*1e6, want*1e6)
	}
	if busiest.Bytes != 8*size || busiest.Name != "host 0 ingress" {
		t.Errorf("busiest link %v, want host 0 ingress with %d bytes", busiest, 8*size)
	}
}

// TestSharedNIC: the R ranks of host 0 each send to a rank of host 1;
// they share the host's egress: L + R·n·G. Within a host, shared memory.
func TestSharedNIC(t *testing.T) {
	cfg := sim.Config{Ranks: 8, Rate: rate, Latency: lat, Topology: sim.Hosts, RanksPerHost: 4,
		Compute: sim.Compute{Mode: sim.ComputeNone}}
	end, _ := sendAll(t, cfg, func(r int) int {
		if r < 4 {
			return r + 4
		}
		return -1
	})
	if want := lat + 4*size/rate; !near(end, want) {
		t.Errorf("4 ranks through one NIC: %.6g us, want %.6g us", end*1e6, want*1e6)
	}
	end, _ = sendAll(t, cfg, func(r int) int { // rank 0 to rank 1 on the same host, nothing else
		if r == 0 {
			return 1
		}
		return -1
	})
	if want := sim.DefaultShmLatency + size/sim.DefaultShmRate; !near(end, want) {
		t.Errorf("within a host: %.6g us, want %.6g us", end*1e6, want*1e6)
	}
}

// TestFatTree: the h hosts of leaf switch 0 each send to a host of leaf 1
// through an uplink h·rate/k. Oversubscribed k = h: the uplink takes the
// messages one after the other at one NIC's rate, L + h·n·G. Not
// oversubscribed: the uplink passes them in n·G/h each and the last one's
// ingress ends at L + ((h-1)/h + 1)·n·G.
func TestFatTree(t *testing.T) {
	const h = 4
	for _, tc := range []struct {
		k    float64
		want float64
	}{
		{h, lat + h*size/rate},
		{1, lat + (float64(h-1)/h+1)*size/rate},
	} {
		cfg := sim.Config{Ranks: 2 * h, Rate: rate, Latency: lat, Topology: sim.FatTree, RanksPerHost: 1,
			HostsPerSwitch: h, Oversubscription: tc.k, Compute: sim.Compute{Mode: sim.ComputeNone}}
		end, _ := sendAll(t, cfg, func(r int) int {
			if r < h {
				return r + h
			}
			return -1
		})
		if !near(end, tc.want) {
			t.Errorf("oversubscription %v: %.6g us, want %.6g us", tc.k, end*1e6, tc.want*1e6)
		}
	}
}
