package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rank stopped with SIGSTOP in the middle of a loop of allreduces is
// named by every other rank: first in a warning after SPARCML_STALL_WARN,
// then in the error of the operation SPARCML_TIMEOUT fails, which comes
// within the timeout (plus the store's close) of the stop rather than
// after another 30 s. Each survivor leaves a flight-recorder dump, and
// `sparcml trace` reads them and names the silent rank.
func TestStalledRankNamed(t *testing.T) {
	const p, victim = 4, 2
	const opTimeout, warn = 8 * time.Second, 3 * time.Second
	dir := t.TempDir()
	j := startJob(t, p, "loop", "SPARCML_TIMEOUT="+opTimeout.String(), "SPARCML_STALL_WARN="+warn.String(),
		"SPARCML_DUMP_DIR="+dir, "SPARCML_DEBUG=WARN")
	t.Cleanup(func() { j.cmds[victim].Process.Signal(syscall.SIGCONT) })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(j.stdout[0].String(), "iter 5") {
		require.True(t, time.Now().Before(deadline), "job did not start: %s", j.stderr[0])
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, j.cmds[victim].Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()

	survivors := &job{}
	for r := 0; r < p; r++ {
		if r != victim {
			survivors.cmds = append(survivors.cmds, j.cmds[r])
			survivors.stdout = append(survivors.stdout, j.stdout[r])
			survivors.stderr = append(survivors.stderr, j.stderr[r])
		}
	}
	times, errs := survivors.exitTimes(t, opTimeout+60*time.Second)
	named := fmt.Sprintf("rank %d silent for", victim)
	for i, r := range []int{0, 1, 3} {
		msg := survivors.stderr[i].String()
		assert.Equal(t, 3, exitCode(errs[i]), "rank %d: %v\nstderr: %s", r, errs[i], msg)
		// The operation started before the stop; the bound is its
		// timeout, the deadline's slack, and rank 0's short close.
		el := times[i].Sub(stopped)
		assert.Less(t, el, opTimeout+5*time.Second, "rank %d exited %v after the stop", r, el)
		errLine, warnLine := -1, -1
		lines := strings.Split(msg, "\n")
		if testing.Verbose() {
			t.Logf("rank %d exited %v after the stop:\n%s", r, el, msg)
		}
		for n, line := range lines {
			if strings.HasPrefix(line, "ERR: ") && errLine < 0 {
				errLine = n
				assert.Contains(t, line, named, "rank %d's error must name the stopped rank", r)
				assert.Contains(t, line, "deadline exceeded", "rank %d", r)
			}
			if strings.Contains(line, "(SPARCML_STALL_WARN)") && warnLine < 0 {
				warnLine = n
				assert.Contains(t, line, named, "rank %d's warning must name the stopped rank", r)
			}
		}
		if assert.True(t, errLine >= 0 && warnLine >= 0, "rank %d: an error and a warning: %s", r, msg) {
			assert.Less(t, warnLine, errLine, "rank %d warns before the timeout", r)
		}
	}

	// The dumps: one per survivor, and the view names the silent rank.
	files, err := filepath.Glob(filepath.Join(dir, "sparcml-flight-*.json"))
	require.NoError(t, err)
	assert.Len(t, files, p-1, "one dump per survivor")
	out, errOut, err := runCmd(t, 30*time.Second, nil, sparcmlBin, "trace", dir)
	require.NoError(t, err, "sparcml trace: %s", errOut)
	assert.Contains(t, out, fmt.Sprintf("no dump from rank %d", victim))
	assert.Contains(t, out, fmt.Sprintf("silent (no progress published for over 2s when another rank dumped): rank %d ", victim))
	for _, r := range []int{0, 1, 3} {
		assert.Contains(t, out, fmt.Sprintf("\nrank %d, last ", r))
	}
	assert.Contains(t, out, "failed")
	if t.Failed() || testing.Verbose() {
		b, _ := os.ReadFile(files[0])
		t.Logf("sparcml trace:\n%s\none dump:\n%s", out, b)
	}
}
