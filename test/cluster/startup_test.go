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
// although SPARCML_INIT_TIMEOUT is a minute: killed once it registered
// with the store (rank 7 is started only after the kill, so the others
// wait on the store), and once its TCP listener is up
// (SPARCML_TRANSPORT=tcp: the others wait for its connections, or see
// them break).
func TestFaultKillAfterStore(t *testing.T) {
	c := shared(t)
	binaries(t)
	const per, victim = 2, 5
	size := per * sharedHosts
	for _, tc := range []struct {
		name     string
		holdLast bool
		env      []string
		reached  func(pid, storePort int) bool
	}{
		{"at-store", true, nil, procwatch.ConnectedTo},
		{"in-tcp-setup", false, []string{"SPARCML_TRANSPORT=tcp"}, procwatch.ListensTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"SPARCML_INIT_TIMEOUT=60s", "SPARCML_CALIBRATE=0"}, tc.env...)
			started := size
			if tc.holdLast {
				started--
			}
			// A set-up can be over between two looks at /proc: the job
			// then ends, and the trial starts again.
			var run *Running
			for attempt := 1; run == nil; attempt++ {
				require.LessOrEqual(t, attempt, 10, "rank %d never caught there in 10 jobs", victim)
				r := startRanks(t, c, started, size, per, env)
				if caught(r, victim, tc.reached) {
					run = r
				} else {
					r.Kill()
					r.Wait(10 * time.Second)
				}
			}
			defer run.Kill()
			if tc.holdLast {
				// Connected is not yet registered (its claim and hello
				// follow); with rank 7 held back the victim waits on the
				// store, so a pause lets it register and keeps it there.
				time.Sleep(300 * time.Millisecond)
			}
			run.Ranks[victim].Kill()
			killed := time.Now()
			if tc.holdLast {
				startRank(t, c, run, size-1, size, per, env)
			}
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
				if tc.holdLast {
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

// startRanks starts ranks 0..n-1 of a job of size ranks, per to a host,
// as Start does; startRank adds one more to it.
func startRanks(t *testing.T, c *Cluster, n, size, per int, env []string) *Running {
	c.mu.Lock()
	port := 29500 + c.jobs%1000
	c.jobs++
	c.mu.Unlock()
	run := &Running{Token: fmt.Sprintf("kill-after-store-%d", time.Now().UnixNano()),
		Addr: net.JoinHostPort(c.Host(0).Addrs[0], strconv.Itoa(port))}
	for r := range n {
		startRank(t, c, run, r, size, per, env)
	}
	return run
}

func startRank(t *testing.T, c *Cluster, run *Running, r, size, per int, env []string) {
	rk, err := c.StartProcess(r/per, append(LauncherEnv(r, size, r%per, per, run.Addr, run.Token, IfName(0)), env...),
		testprogBin, "empty")
	require.NoError(t, err)
	rk.Rank = r
	run.Ranks = append(run.Ranks, rk)
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
