package cluster

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/procwatch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rank killed during Init once it reached rank 0's store, on emulated
// hosts (P = 8, two ranks per host: shared memory within a host, TCP
// between hosts), fails every other rank within 5 s, each naming it,
// although SPARCML_INIT_TIMEOUT is a minute: killed as soon as it holds
// a connection to the store, and once its TCP listener is up (SPARCML_TRANSPORT=tcp: the others wait
// for its connections, or see them break).
func TestFaultKillAfterStore(t *testing.T) {
	c := shared(t)
	binaries(t)
	const per, victim = 2, 5
	for _, tc := range []struct {
		name    string
		env     []string
		reached func(pid, storePort int) bool
	}{
		{"at-store", nil, procwatch.ConnectedTo},
		{"in-tcp-setup", []string{"SPARCML_TRANSPORT=tcp"}, procwatch.ListensTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"SPARCML_INIT_TIMEOUT=60s", "SPARCML_CALIBRATE=0"}, tc.env...)
			// A set-up can be over between two looks at /proc: the job
			// then ends, and the trial starts again.
			var run *Running
			for attempt := 1; run == nil; attempt++ {
				require.LessOrEqual(t, attempt, 10, "rank %d never caught there in 10 jobs", victim)
				r, err := c.Start(Job{RanksPerHost: per, Cmd: []string{testprogBin, "empty"}, Env: env})
				require.NoError(t, err)
				if caught(r, victim, tc.reached) {
					run = r
				} else {
					r.Kill()
					r.Wait(10 * time.Second)
				}
			}
			defer run.Kill()
			run.Ranks[victim].Kill()
			killed := time.Now()
			w := watchErrors(run)
			hung := w.wait([]int{victim}, 30*time.Second)
			require.NoError(t, hung)
			cause := fmt.Sprintf("the launch failed: rank %d left the rendezvous store during Init without a goodbye (killed or crashed?)", victim)
			// Killed in the set-up, the victim may have finished it just
			// before: the others then see its death on their connections
			// (rank 5 peer lost), which names it too.
			named := regexp.MustCompile(fmt.Sprintf(`%s|rank %d peer lost`, regexp.QuoteMeta(cause), victim))
			for i, rk := range run.Ranks {
				if rk.Rank == victim {
					continue
				}
				if tc.name == "at-store" {
					assert.Contains(t, rk.Stderr(), cause, "rank %d", rk.Rank)
				} else {
					assert.Regexp(t, named, rk.Stderr(), "rank %d", rk.Rank)
				}
				assert.Less(t, w.seen[i].Sub(killed), 5*time.Second, "rank %d failed %v after the kill", rk.Rank, w.seen[i].Sub(killed))
			}
			res, _ := run.Wait(10 * time.Second)
			for _, r := range res {
				if r.Rank != victim {
					// Init fails (4), or, for a rank whose own set-up
					// was over, its first operation (3).
					assert.Contains(t, []int{3, 4}, r.ExitCode, "rank %d: %s", r.Rank, r.Stderr)
				}
			}
		})
	}
}

// caught waits until rank's process of run reached a point (reached,
// given its pid and the store's port), false if it exited first.
func caught(run *Running, rank int, reached func(pid, storePort int) bool) bool {
	_, portText, _ := net.SplitHostPort(run.Addr)
	storePort, _ := strconv.Atoi(portText)
	rk := run.Ranks[rank]
	deadline := time.Now().Add(30 * time.Second)
	for !reached(rk.cmd.Process.Pid, storePort) {
		select {
		case <-rk.Done():
			return false
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
