package test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exitTimes waits for every process of j and returns when each exited,
// failing the test on a hang.
func (j *job) exitTimes(t *testing.T, timeout time.Duration) ([]time.Time, []error) {
	t.Helper()
	times := make([]time.Time, len(j.cmds))
	errs := make([]error, len(j.cmds))
	done := make(chan struct{}, len(j.cmds))
	for i, c := range j.cmds {
		go func(i int, c *exec.Cmd) {
			errs[i] = c.Wait()
			times[i] = time.Now()
			done <- struct{}{}
		}(i, c)
	}
	deadline := time.After(timeout)
	for range j.cmds {
		select {
		case <-done:
		case <-deadline:
			for i := range j.cmds {
				t.Logf("process %d stdout:\n%s\nstderr:\n%s", i, j.stdout[i], j.stderr[i])
			}
			t.Fatalf("processes did not exit within %v (hang)", timeout)
		}
	}
	return times, errs
}

// A broken launch ends every live rank within 5 s of the store seeing it
// (or of the bad rank reporting its failed Init), with the cause in rank
// 0's error, although SPARCML_INIT_TIMEOUT is a minute. The bad process is the last one started; the bound runs from
// its exit (it fails as soon as the store refuses it).
func TestBrokenLaunchFailsFast(t *testing.T) {
	const initTimeout = "SPARCML_INIT_TIMEOUT=60s"
	for _, tc := range []struct {
		name  string
		ranks []int    // the rank of each process; the last is the bad one
		bad   []string // its environment
		cause string   // in rank 0's error
		all   []string // every rank's environment
	}{
		{"wrong-token", []int{0, 2, 1}, []string{"SPARCML_TOKEN=a-wrong-token"}, "rank 1 presented a wrong token", nil},
		{"size-mismatch", []int{0, 2, 1}, []string{"SPARCML_SIZE=4"}, "rank 1 says the job has 4 ranks, rank 0 has 3", nil},
		{"duplicate-rank", []int{0, 1, 1}, nil, "rank 1 is already connected", nil},
		// Past the store, rank 1's TCP set-up fails (no such interface):
		// the ranks waiting on its connections hear why from the store.
		{"set-up-fails", []int{0, 2, 1}, []string{"SPARCML_IFNAME=nosuchif0"}, "rank 1 failed Init: ", []string{"SPARCML_TRANSPORT=tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const p = 3
			j := &job{addr: freeAddr(t)}
			last := len(tc.ranks) - 1
			for i, r := range tc.ranks {
				extra := append([]string{initTimeout}, tc.all...)
				if i == last {
					extra = append(extra, tc.bad...)
					time.Sleep(300 * time.Millisecond) // the others are up
				}
				startRank(t, j, r, p, "empty", extra...)
			}
			times, errs := j.exitTimes(t, 90*time.Second)
			first := times[last]
			for i := range tc.ranks {
				assert.Equal(t, 4, exitCode(errs[i]), "process %d (rank %d): %v\nstderr: %s", i, tc.ranks[i], errs[i], j.stderr[i])
				if times[i].Before(first) {
					first = times[i]
				}
			}
			for i := range tc.ranks {
				el := times[i].Sub(first)
				assert.Less(t, el, 5*time.Second, "process %d (rank %d) failed %v after the first", i, tc.ranks[i], el)
			}
			msg := j.stderr[0].String()
			assert.Contains(t, msg, "sparcml: rank 0: the launch failed: "+tc.cause, "rank 0's error")
			for i := 1; i < last; i++ {
				assert.Contains(t, j.stderr[i].String(), tc.cause, "process %d (rank %d)", i, tc.ranks[i])
			}
		})
	}
}

// A rank that never arrives fails the others at SPARCML_INIT_TIMEOUT (not
// later), each naming the missing rank.
func TestMissingRankFailsAtInitTimeout(t *testing.T) {
	const p, timeout = 4, 4 * time.Second
	j := &job{addr: freeAddr(t)}
	start := time.Now()
	for _, r := range []int{0, 1, 3} {
		startRank(t, j, r, p, "empty", "SPARCML_INIT_TIMEOUT="+timeout.String())
	}
	times, errs := j.exitTimes(t, 60*time.Second)
	for i, r := range []int{0, 1, 3} {
		assert.Equal(t, 4, exitCode(errs[i]), "rank %d: %v\nstderr: %s", r, errs[i], j.stderr[i])
		el := times[i].Sub(start)
		// Started at once, each fails at its own deadline (or at rank 0's);
		// the margin covers process start on a loaded machine.
		assert.Less(t, el, timeout+3*time.Second, "rank %d failed after %v", r, el)
		msg := j.stderr[i].String()
		assert.Contains(t, msg, "rank 2 never reached the rendezvous store", "rank %d", r)
		assert.Contains(t, msg, fmt.Sprintf("INIT: sparcml: rank %d: the launch failed: ", r), "rank %d", r)
	}
	require.Contains(t, j.stderr[0].String(), "SPARCML_INIT_TIMEOUT (4s)")
}
