// Package test holds the multi-process tests: real ranks in separate
// processes over TCP loopback, started through `sparcml run` or directly
// with the launcher's environment, every result checked against a
// reference, every run bounded by a deadline.
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	sparcmlBin  string // the CLI under test
	testprogBin string // the rank program
)

func TestMain(m *testing.M) {
	// os.Exit skips deferred calls: the temporary directory is removed in
	// run, before the exit.
	os.Exit(run(m))
}

// run builds the binaries the tests need into a temporary directory,
// runs the tests and removes the directory.
func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sparcml-it-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sparcmlBin = os.Getenv("SPARCML_BIN")
	if sparcmlBin == "" {
		sparcmlBin = filepath.Join(dir, "sparcml")
		build(sparcmlBin, "../cmd/sparcml")
	}
	// In the soft-RoCE guest there is no Go toolchain: the harness passes
	// binaries built on the host.
	testprogBin = os.Getenv("SPARCML_TESTPROG")
	if testprogBin == "" {
		testprogBin = filepath.Join(dir, "testprog")
		build(testprogBin, "./testprog")
	}
	return m.Run()
}

func build(out, pkg string) {
	args := []string{"build", "-o", out}
	if tags := os.Getenv("TAGS"); tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		panic(fmt.Sprintf("go build %s: %v", pkg, err))
	}
}

// runCmd runs a command with a deadline and returns its output and error.
func runCmd(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v (hang)\nstdout:\n%s\nstderr:\n%s", name, args, timeout, o.String(), e.String())
	}
	return o.String(), e.String(), err
}

// Every collective, algorithm and dtype, random lengths including 0 and 1,
// through the launcher, for several job sizes.
func TestCollectivesThroughLauncher(t *testing.T) {
	for _, p := range jobSizes(t, []int{1, 2, 3, 4, 5, 8}) {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			seed := strconv.Itoa(int(time.Now().UnixNano()%1000) + p)
			out, errOut, err := runCmd(t, 4*time.Minute, nil, sparcmlBin, "run", "-n", strconv.Itoa(p), "--", testprogBin, "collectives", seed)
			require.NoError(t, err, "seed %s\nstdout:\n%s\nstderr:\n%s", seed, out, errOut)
			for r := 0; r < p; r++ {
				assert.Contains(t, out, fmt.Sprintf("[%d] rank %d: collectives ok", r, r))
			}
		})
	}
}

// jobSizes is the list of P to run, from SPARCML_TEST_PS ("2,3,4") when
// set: the soft-RoCE guest runs fewer, slower ranks.
func jobSizes(t *testing.T, def []int) []int {
	s := os.Getenv("SPARCML_TEST_PS")
	if s == "" {
		return def
	}
	var ps []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "SPARCML_TEST_PS=%q", s)
		ps = append(ps, p)
	}
	return ps
}

// wantTransport is the transport the job must use: shared memory (auto,
// the default, on one host), or SPARCML_TRANSPORT when the harness forces
// one (rdma in the guest).
func wantTransport() string {
	if t := os.Getenv("SPARCML_TRANSPORT"); t != "" && t != "auto" {
		return t
	}
	return "shm"
}

// jsonFields are the fields of every JSON row of sparcml bench: those
// scripts read, and the redop, root, mean time and wrong-element count.
var jsonFields = []string{"op", "algo", "algo_chosen", "transport", "np", "n", "dtype", "bytes", "time_us_min", "time_us_median",
	"time_us_max", "algbw_gbps", "busbw_gbps", "bytes_sent_per_rank", "check", "max_rss_bytes",
	"redop", "root", "time_us_avg", "wrong"}

// The benchmark's own --check path and its JSON output fields.
func TestBenchCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		p        int
		op, algo string
		dtype    string
	}{
		{3, "allreduce", "ring", "float32"},
		{4, "allreduce", "rabenseifner", "float64"},
		{5, "allreduce", "recursive-doubling", "float32"},
		{4, "reduce-scatter", "auto", "float32"},
		{3, "allgather", "auto", "float64"},
		{4, "broadcast", "auto", "float32"},
		{2, "p2p", "auto", "float32"},
		{3, "barrier", "auto", "float32"},
	} {
		t.Run(fmt.Sprintf("%s-%s-P%d", tc.op, tc.algo, tc.p), func(t *testing.T) {
			out, errOut, err := runCmd(t, 2*time.Minute, nil, sparcmlBin, "bench", "-n", strconv.Itoa(tc.p),
				"--op", tc.op, "--algo", tc.algo, "--dtype", tc.dtype, "--sizes", "0,1,1000,33K",
				"--iters", "3", "--warmup", "1", "--check", "--format", "json")
			require.NoError(t, err, "stderr:\n%s", errOut)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 4, out)
			for _, l := range lines {
				var row map[string]any
				require.NoError(t, json.Unmarshal([]byte(l), &row), l)
				for _, f := range jsonFields {
					assert.Contains(t, row, f)
				}
				assert.Equal(t, tc.op, row["op"])
				assert.Equal(t, float64(tc.p), row["np"])
				assert.Equal(t, wantTransport(), row["transport"])
				want, wrong := "ok", any(0.0)
				if tc.op == "barrier" {
					want, wrong = "skipped", nil
				}
				assert.Equal(t, want, row["check"], l)
				assert.Equal(t, wrong, row["wrong"], l)
				assert.LessOrEqual(t, row["time_us_min"], row["time_us_median"])
				assert.LessOrEqual(t, row["time_us_median"], row["time_us_max"])
			}
		})
	}
}

// job starts p ranks of testprog directly (not through the launcher) so a
// test can kill one of them.
type job struct {
	cmds   []*exec.Cmd
	stdout []*bytes.Buffer
	stderr []*bytes.Buffer
	addr   string
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func jobEnv(addr string, rank, size int, extra ...string) []string {
	return append(append(os.Environ(),
		"SPARCML_RANK="+strconv.Itoa(rank), "SPARCML_SIZE="+strconv.Itoa(size),
		"SPARCML_ADDR="+addr, "SPARCML_TOKEN=integration-test-token"), extra...)
}

func startRank(t *testing.T, j *job, rank, size int, scenario string, extra ...string) {
	cmd := exec.Command(testprogBin, scenario)
	cmd.Env = jobEnv(j.addr, rank, size, extra...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	require.NoError(t, cmd.Start())
	j.cmds = append(j.cmds, cmd)
	j.stdout = append(j.stdout, &o)
	j.stderr = append(j.stderr, &e)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
}

func startJob(t *testing.T, p int, scenario string, extra ...string) *job {
	j := &job{addr: freeAddr(t)}
	for r := 0; r < p; r++ {
		startRank(t, j, r, p, scenario, extra...)
	}
	return j
}

// waitAll waits for every process, failing the test on a hang.
func (j *job) waitAll(t *testing.T, timeout time.Duration) []error {
	errs := make([]error, len(j.cmds))
	done := make(chan int, len(j.cmds))
	for i, c := range j.cmds {
		go func(i int, c *exec.Cmd) {
			errs[i] = c.Wait()
			done <- i
		}(i, c)
	}
	deadline := time.After(timeout)
	for range j.cmds {
		select {
		case <-done:
		case <-deadline:
			for i := range j.cmds {
				t.Logf("rank %d stdout:\n%s\nstderr:\n%s", i, j.stdout[i], j.stderr[i])
			}
			t.Fatalf("ranks did not exit within %v (hang)", timeout)
		}
	}
	return errs
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Killing one rank in the middle of allreduces makes every other rank fail
// with an error naming it, well before the operation deadline.
func TestKillRankDuringAllreduce(t *testing.T) {
	const p, victim = 4, 2
	const opTimeout = 60 * time.Second
	j := startJob(t, p, "loop", "SPARCML_TIMEOUT="+opTimeout.String())
	// Wait until the job is running allreduces.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(j.stdout[0].String(), "iter 5") {
		require.True(t, time.Now().Before(deadline), "job did not start: %s", j.stderr[0])
		time.Sleep(20 * time.Millisecond)
	}
	killed := time.Now()
	require.NoError(t, j.cmds[victim].Process.Signal(syscall.SIGKILL))
	// The deadline plus a small margin bounds the survivors' exit; with
	// connection loss detected they fail almost at once.
	errs := j.waitAll(t, opTimeout+10*time.Second)
	elapsed := time.Since(killed)
	for r := 0; r < p; r++ {
		if r == victim {
			continue
		}
		assert.Equal(t, 3, exitCode(errs[r]), "rank %d: %v\nstderr: %s", r, errs[r], j.stderr[r])
		msg := j.stderr[r].String()
		assert.Contains(t, msg, "allreduce seq", "rank %d: %s", r, msg)
		assert.Contains(t, msg, fmt.Sprintf("rank %d", victim), "rank %d must name the dead rank: %s", r, msg)
		checkPrefixes(t, r, msg)
	}
	t.Logf("survivors failed %v after the kill", elapsed)
	assert.Less(t, elapsed, opTimeout, "failure must come from connection loss, not the deadline")
}

// checkPrefixes checks that each line of a rank's stderr says who says it
// once: the error (after "ERR: ") starts "sparcml: rank R: " and names
// rank R no other way, and every other line is a log line with one
// "host:pid [R] sparcml" prefix.
func checkPrefixes(t *testing.T, rank int, stderr string) {
	t.Helper()
	self := fmt.Sprintf("rank %d:", rank)
	logLine := regexp.MustCompile(fmt.Sprintf(`^\S+:\d+ \[%d\] sparcml `, rank))
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if msg, ok := strings.CutPrefix(line, "ERR: "); ok {
			assert.True(t, strings.HasPrefix(msg, "sparcml: "+self+" "), "rank %d's error: %s", rank, msg)
			assert.Equal(t, 1, strings.Count(msg, "sparcml:"), "one sparcml prefix in rank %d's error: %s", rank, msg)
			assert.Equal(t, 1, strings.Count(msg, self), "rank %d named once in its own error: %s", rank, msg)
			continue
		}
		if assert.Regexp(t, logLine, line, "rank %d", rank) {
			rest := logLine.ReplaceAllString(line, "")
			assert.NotContains(t, rest, self, "the log line repeats the rank: %s", line)
			assert.NotContains(t, rest, "sparcml:", "the log line repeats the prefix: %s", line)
		}
	}
}

// At the default level (WARN) a job that succeeds writes rank 0's
// start-up line and nothing else: no refused connections, no goodbyes, no
// "use of closed network connection" while it shuts down.
func TestDefaultLevelIsQuiet(t *testing.T) {
	for round := 0; round < 3; round++ {
		out, errOut, err := runCmd(t, 2*time.Minute, []string{"SPARCML_DEBUG="}, sparcmlBin, "run", "-n", "4", "--", testprogBin, "dense")
		require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, errOut)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		require.Len(t, lines, 1, "round %d: stderr holds more than the start-up line:\n%s", round, errOut)
		assert.Regexp(t, `^\[0\] \S+:\d+ \[0\] sparcml version .*: 4 ranks, transport `+wantTransport()+`, launcher sparcml, ready in `, lines[0])
	}
}

// Collective mismatches and bad arguments fail on every rank with a clear
// error, and the communicator works again afterwards.
func TestBadInputEveryRank(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     string
	}{
		{"mismatch-len", "mismatch"},
		{"mismatch-op", "mismatch"},
		{"nil-buffer", "mismatch"},
		{"bad-root", "root"},
		{"sparse-bad-input", "rank 1"},
		{"sparse-dim-mismatch", "mismatch"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			j := startJob(t, 3, tc.scenario, "SPARCML_TIMEOUT=30s")
			errs := j.waitAll(t, 60*time.Second)
			for r := range errs {
				require.NoError(t, errs[r], "rank %d stderr:\n%s", r, j.stderr[r])
				msg := j.stderr[r].String()
				assert.Contains(t, msg, "EXPECTED: ", "rank %d", r)
				assert.Contains(t, strings.ToLower(msg), tc.want, "rank %d: %s", r, msg)
				assert.Contains(t, j.stdout[r].String(), "ok")
			}
		})
	}
	t.Run("empty-buffers-are-valid", func(t *testing.T) {
		j := startJob(t, 3, "empty")
		for r, err := range j.waitAll(t, 60*time.Second) {
			assert.NoError(t, err, "rank %d: %s", r, j.stderr[r])
		}
	})
}

func TestInitErrors(t *testing.T) {
	t.Run("rank>=size", func(t *testing.T) {
		cmd := exec.Command(testprogBin, "empty")
		cmd.Env = jobEnv(freeAddr(t), 4, 4)
		out, err := cmd.CombinedOutput()
		assert.Equal(t, 4, exitCode(err), string(out))
		assert.Contains(t, string(out), "SPARCML_RANK")
	})
	t.Run("unreachable-rendezvous", func(t *testing.T) {
		cmd := exec.Command(testprogBin, "empty")
		cmd.Env = jobEnv("127.0.0.1:1", 1, 2, "SPARCML_INIT_TIMEOUT=3s")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		assert.Equal(t, 4, exitCode(err), string(out))
		assert.Contains(t, string(out), "127.0.0.1:1")
		assert.Less(t, time.Since(start), 20*time.Second)
	})
	t.Run("wrong-rendezvous-service", func(t *testing.T) {
		// Something that is not a sparcml store listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				c.Close()
			}
		}()
		cmd := exec.Command(testprogBin, "empty")
		cmd.Env = jobEnv(ln.Addr().String(), 1, 2, "SPARCML_INIT_TIMEOUT=3s")
		out, err := cmd.CombinedOutput()
		assert.Equal(t, 4, exitCode(err), string(out))
		assert.Contains(t, string(out), ln.Addr().String())
	})
}

// A stranger with the wrong token is refused by rank 0's store while the
// job runs, and the job is unaffected.
func TestWrongTokenRefused(t *testing.T) {
	const p = 3
	j := &job{addr: freeAddr(t)}
	startRank(t, j, 0, p, "collectives")
	// Pose as rank 1 with a wrong token before the real rank 1 starts.
	intruder := exec.Command(testprogBin, "empty")
	intruder.Env = append(jobEnv(j.addr, 1, p, "SPARCML_INIT_TIMEOUT=5s"), "SPARCML_TOKEN=wrong-token")
	out, err := intruder.CombinedOutput()
	assert.Equal(t, 4, exitCode(err), "the intruder must fail to join: %s", out)
	assert.Contains(t, strings.ToLower(string(out)), "auth")
	for r := 1; r < p; r++ {
		startRank(t, j, r, p, "collectives")
	}
	for r, err := range j.waitAll(t, 3*time.Minute) {
		assert.NoError(t, err, "rank %d: %s", r, j.stderr[r])
	}
}

// The launcher stops the job and names the rank that failed.
func TestLauncherStopsOnFailure(t *testing.T) {
	script := `if [ "$SPARCML_RANK" = 1 ]; then exit 7; fi; sleep 60`
	start := time.Now()
	_, errOut, err := runCmd(t, 30*time.Second, nil, sparcmlBin, "run", "-n", "3", "--", "sh", "-c", script)
	assert.Equal(t, 7, exitCode(err))
	assert.Contains(t, errOut, "rank 1 exited with status 7")
	assert.Less(t, time.Since(start), 20*time.Second)
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--op", "allreduse"},
		{"bench", "--algo", "fastest"},
		{"bench", "--sizes", "12Q"},
		{"bench", "--format", "xml"},
	} {
		_, errOut, err := runCmd(t, 10*time.Second, nil, sparcmlBin, args...)
		assert.Equal(t, 2, exitCode(err), "%v: %s", args, errOut)
		assert.Contains(t, errOut, args[2], "the error names the bad value")
	}
}

// cleanEnv is this process's environment without any launcher's or
// sparcml's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "SPARCML_"), strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "PMI_"),
			strings.HasPrefix(name, "SLURM_"), name == "RANK", name == "WORLD_SIZE", name == "MASTER_ADDR", name == "MASTER_PORT":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// A rank program started on its own runs as a one-rank job.
func TestOneRankWithoutLauncher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testprogBin, "collectives", "7")
	cmd.Env = append(cleanEnv(), "SPARCML_DEBUG=INFO")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", o.String(), e.String())
	assert.Contains(t, o.String(), "rank 0: collectives ok")
	assert.Contains(t, e.String(), "INFO init: no launcher environment")
	assert.Contains(t, e.String(), "1 rank, transport tcp, launcher none")
}

// An invalid variable stops the CLI before it starts any rank, with one
// error that names the variable and the value and one prefix.
func TestCLIRejectsInvalidVariables(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"SPARCML_TIMEOUT=soon", []string{"bench", "-n", "2", "--op", "barrier", "--iters", "1"}},
		{"SPARCML_DEBUG=debug", []string{"run", "-n", "2", "--", testprogBin, "empty"}},
		{"SPARCML_TRANSPORT=ib", []string{"bench", "--op", "barrier", "--iters", "1"}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			_, errOut, err := runCmd(t, 30*time.Second, []string{tc.env}, sparcmlBin, tc.args...)
			assert.Equal(t, 1, exitCode(err), errOut)
			name, value, _ := strings.Cut(tc.env, "=")
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			require.Len(t, lines, 1, errOut)
			assert.True(t, strings.HasPrefix(lines[0], "sparcml "+tc.args[0]+": "+name+"="+strconv.Quote(value)+": "), lines[0])
			assert.Equal(t, 1, strings.Count(lines[0], "sparcml"), lines[0])
		})
	}
}
