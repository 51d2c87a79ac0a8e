package test

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/procwatch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rank killed during Init after it reached rank 0's store fails every
// other rank within 5 s, each naming it, although SPARCML_INIT_TIMEOUT is
// a minute: killed at the store (the others wait on the store, rank 7
// not yet started) and in the shared-memory set-up (its socket is up;
// the others wait for its connections or have seen them break).
func TestKillAfterStoreFailsEveryRank(t *testing.T) {
	const p, victim = 8, 5
	for _, tc := range []struct {
		name     string
		holdLast bool                     // rank 7 is started only after the kill
		reached  func(pid, port int) bool // when to kill the victim
	}{
		{"at-store", true, procwatch.ConnectedTo},
		{"in-shm-setup", false, func(pid, _ int) bool { return procwatch.ListensOn(pid, "@sparcml-shm-") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &job{addr: freeAddr(t)}
			_, portText, _ := net.SplitHostPort(j.addr)
			port, _ := strconv.Atoi(portText)
			env := []string{"SPARCML_INIT_TIMEOUT=60s", "SPARCML_TRANSPORT=shm"}
			started := p
			if tc.holdLast {
				started = p - 1
			}
			for r := range started {
				startRank(t, j, r, p, "empty", env...)
			}
			pid := j.cmds[victim].Process.Pid
			deadline := time.Now().Add(30 * time.Second)
			for !tc.reached(pid, port) {
				require.True(t, time.Now().Before(deadline), "rank %d never got there", victim)
				time.Sleep(time.Millisecond)
			}
			if tc.holdLast {
				// Connected is not yet registered (its claim and hello
				// follow); with rank 7 held back the victim waits on the
				// store, so a pause lets it register and keeps it there.
				time.Sleep(300 * time.Millisecond)
			}
			require.NoError(t, j.cmds[victim].Process.Signal(syscall.SIGKILL))
			killed := time.Now()
			if tc.holdLast {
				startRank(t, j, p-1, p, "empty", env...)
			}
			times, errs := j.exitTimes(t, 90*time.Second)
			cause := fmt.Sprintf("the launch failed: rank %d left the rendezvous store during Init without a goodbye (killed or crashed?)", victim)
			// Killed in the set-up, the victim may have finished it just
			// before: the others then see its death on their connections
			// (rank 5 peer lost), which names it too.
			named := regexp.MustCompile(fmt.Sprintf(`%s|rank %d peer lost`, regexp.QuoteMeta(cause), victim))
			for i := range j.cmds {
				if i == victim {
					continue
				}
				// Init fails (4), or, for a rank whose own set-up was
				// over, its first operation (3).
				assert.Contains(t, []int{3, 4}, exitCode(errs[i]), "rank %d: %v\nstderr: %s", i, errs[i], j.stderr[i])
				if tc.holdLast {
					assert.Equal(t, 4, exitCode(errs[i]), "rank %d", i)
				}
				if tc.holdLast {
					assert.Contains(t, j.stderr[i].String(), cause, "rank %d", i)
				} else {
					assert.Regexp(t, named, j.stderr[i].String(), "rank %d", i)
				}
				assert.Less(t, times[i].Sub(killed), 5*time.Second, "rank %d failed %v after the kill", i, times[i].Sub(killed))
			}
		})
	}
}
