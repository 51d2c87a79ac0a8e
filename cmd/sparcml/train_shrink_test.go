package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rankPid finds the process of rank r among the launcher's children.
func rankPid(launcher, r int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", launcher, launcher))
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		var pid int
		fmt.Sscan(f, &pid)
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && bytes.Contains(env, []byte(fmt.Sprintf("\x00SPARCML_RANK=%d\x00", r))) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no rank %d among the children %q", r, b)
}

// sparcml train --on-failure shrink: rank 2 of 4 is killed with SIGKILL
// after the second evaluation; the three survivors say so, go on with
// the data re-sharded, and finish the run: the last record is at the
// last epoch with 3 ranks, well above the accuracy before training, and
// the saved model evaluated again on one rank gives that accuracy.
func TestTrainOnFailureShrink(t *testing.T) {
	fashionMNIST(t)
	bin := sparcmlBinary(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "m.npz")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "train", "-n", "4", "--on-failure", "shrink", "--hidden", "64,32",
		"--samples", "6000", "--epochs", "3", "--eval-every", "0.25", "--format", "json", "--save", model)
	cmd.Env = append(os.Environ(), "SPARCML_DEBUG=NONE", "SPARCML_TIMEOUT=30s")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	lines := 0
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if lines++; lines == 3 { // the evaluations before training and after a quarter epoch
			pid, err := rankPid(cmd.Process.Pid, 2)
			if err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("hang\nstdout:\n%s\nstderr:\n%s", out.String(), errBuf.String())
	}
	stderr := errBuf.String()
	if err == nil || !strings.Contains(stderr, "rank 2 was killed") {
		t.Fatalf("want the launcher to report rank 2 killed, got %v\nstderr:\n%s", err, stderr)
	}
	if n := strings.Count(stderr, "lost rank(s) [2]; going on as rank"); n != 3 {
		t.Fatalf("%d survivors say they go on, want 3\nstderr:\n%s", n, stderr)
	}
	recs := records(t, out.String())
	final := recs[len(recs)-1]
	if final.NP != 3 || final.Epoch != 3 {
		t.Fatalf("final record %+v: want 3 ranks at epoch 3\nstdout:\n%s\nstderr:\n%s", final, out.String(), stderr)
	}
	if recs[1].NP != 4 {
		t.Fatalf("the first evaluations ran on %d ranks, want 4", recs[1].NP)
	}
	if final.TestAccuracy < 0.6 || final.TestAccuracy <= recs[0].TestAccuracy+0.3 {
		t.Fatalf("accuracy %.3f at the end, %.3f before training", final.TestAccuracy, recs[0].TestAccuracy)
	}
	again, errOut, err := runTrain(t, 2*time.Minute, "-n", "1", "--hidden", "64,32", "--samples", "6000",
		"--epochs", "0", "--load", model, "--format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if r := records(t, again); len(r) != 1 || r[0].TestAccuracy != final.TestAccuracy {
		t.Fatalf("the saved model evaluates to %+v, the run ended at accuracy %v", r, final.TestAccuracy)
	}
}
