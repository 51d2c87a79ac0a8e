package startup

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/topology"
)

// Rank 0's choice for each mode on one host and on two hosts of two
// ranks, with and without RDMA on every rank.
func TestDecideTransport(t *testing.T) {
	twoHosts := topology.New([]int{0, 0, 1, 1})
	one := topology.OneHost(4)
	yes := func(int) (string, error) { return "yes", nil }
	notOn3 := func(r int) (string, error) {
		if r == 3 {
			return "no: no device", nil
		}
		return "yes", nil
	}
	for _, tc := range []struct {
		name   string
		topo   topology.Topology
		mode   string
		can    func(int) (string, error)
		local  bool
		remote string
		err    string
	}{
		{"auto one host", one, "auto", yes, shmSupported, map[bool]string{true: "", false: "tcp"}[shmSupported], ""},
		{"auto two hosts tcp", twoHosts, "auto", notOn3, shmSupported, "tcp", ""},
		{"auto two hosts rdma", twoHosts, "auto", yes, shmSupported, "rdma", ""},
		{"tcp", twoHosts, "tcp", yes, false, "tcp", ""},
		{"rdma", twoHosts, "rdma", yes, false, "rdma", ""},
		{"rdma missing", twoHosts, "rdma", notOn3, false, "", "no device (on rank 3)"},
		{"shm two hosts", twoHosts, "shm", yes, false, "", "SPARCML_TRANSPORT=shm needs every rank on one host, but the job runs on 2: host 0: ranks 0-1; host 1: ranks 2-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mode == "shm" && !shmSupported {
				t.Skip("no shared memory on this system")
			}
			env := bootstrap.Env{Rank: 0, Size: 4}
			p, err := decide(context.Background(), env, tc.topo, tc.mode, "SPARCML_TRANSPORT", tc.can)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || p.local != tc.local || p.remote != tc.remote {
				t.Fatalf("plan %+v (%v), want local %v remote %q", p, err, tc.local, tc.remote)
			}
			back, err := decodePlan(encodePlan(p))
			if err != nil || back != p {
				t.Fatalf("plan %+v came back from the store as %+v (%v)", p, back, err)
			}
		})
	}
}

// The model's pair crosses hosts when there are several; the second pair
// stays within rank 0's host.
func TestCalibrationPeers(t *testing.T) {
	for _, tc := range []struct {
		hosts []int
		want  []int
	}{
		{[]int{0, 0, 0, 0}, []int{1}},
		{[]int{0, 0, 1, 1}, []int{2, 1}},
		{[]int{0, 1, 0, 1}, []int{1, 2}},
		{[]int{0, 1, 2, 3}, []int{1}},
	} {
		got := CalibrationPeers(topology.New(tc.hosts))
		if !slices.Equal(got, tc.want) {
			t.Errorf("hosts %v: peers %v, want %v", tc.hosts, got, tc.want)
		}
	}
}
