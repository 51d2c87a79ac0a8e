package sparcml

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// launcherVars are every launcher's variables; clearEnv unsets them (and
// sparcml's logging ones) for the test, so it sees a process started on
// its own whatever the environment of the test run.
var launcherVars = []string{
	"SPARCML_RANK", "SPARCML_SIZE", "SPARCML_ADDR", "SPARCML_TOKEN", "SPARCML_PORT", "SPARCML_IFNAME",
	"SPARCML_TRANSPORT", "SPARCML_TIMEOUT", "SPARCML_INIT_TIMEOUT", "SPARCML_CALIBRATE",
	"SPARCML_DEBUG", "SPARCML_DEBUG_SUBSYS",
	"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS",
}

func clearEnv(t *testing.T) {
	for _, v := range launcherVars {
		t.Setenv(v, "")
	}
}

// lineLog collects the lines WithLogger hands over.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *lineLog) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Without any launcher, Init gives a one-rank communicator that works, and
// says so at INFO.
func TestInitWithoutLauncherIsOneRank(t *testing.T) {
	clearEnv(t)
	t.Setenv("SPARCML_DEBUG", "INFO")
	var log lineLog
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Init(ctx, WithLogger(log.logf))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 0, c.Rank())
	assert.Equal(t, 1, c.Size())
	assert.Equal(t, "tcp", c.Transport())
	data := []float64{1.5, -2, 3}
	require.NoError(t, Allreduce(ctx, c, data, Sum))
	assert.Equal(t, []float64{1.5, -2, 3}, data, "the sum over one rank is its own vector")
	out := []float64{0, 0, 0}
	require.NoError(t, Allgather(ctx, c, []float64{4, 5, 6}, out))
	assert.Equal(t, []float64{4, 5, 6}, out)
	assert.Len(t, log.matching("INFO init: no launcher environment"), 1, log.String())
	assert.Len(t, log.matching("one-rank job"), 1, log.String())
	start := log.matching("sparcml ")
	require.NotEmpty(t, start)
	assert.Len(t, log.matching("1 rank, transport tcp, launcher none"), 1, log.String())
}

// An incomplete launcher environment stays an error, and so does a
// rendezvous address without a rank.
func TestInitIncompleteLauncher(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"SPARCML_RANK": "0"}, "SPARCML_RANK is set but SPARCML_SIZE is not"},
		{map[string]string{"WORLD_SIZE": "4"}, "WORLD_SIZE is set but RANK is not"},
		{map[string]string{"SPARCML_ADDR": "127.0.0.1:1"}, "rendezvous address is set"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.vars {
				t.Setenv(k, v)
			}
			_, err := Init(context.Background(), WithLogger(nil))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "sparcml: "), "%v", err)
			assert.NotContains(t, err.Error(), "sparcml: sparcml:")
		})
	}
}

// Invalid values fail Init naming the variable and the value (the table's
// own test covers every variable; this one the path through Init).
func TestInitRejectsInvalidVariables(t *testing.T) {
	for name, value := range map[string]string{
		"SPARCML_INIT_TIMEOUT": "xyz",
		"SPARCML_DEBUG":        "verbose",
		"SPARCML_RDMA_SPIN":    "fast",
	} {
		t.Run(name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(name, value)
			_, err := Init(context.Background(), WithLogger(nil))
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("%s=%q", name, value))
			_, err = Local(2)
			require.Error(t, err, "Local reads the same table")
			assert.Contains(t, err.Error(), name)
		})
	}
}

// initJob starts a job of size ranks in this process through Init, each
// rank in its own goroutine, over TCP loopback.
func initJob(t *testing.T, size int, opts ...Option) []*Comm {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := append([]Option{WithRank(r, size), WithAddr(addr), WithToken("init-test"), WithTransport("tcp")}, opts...)
			comms[r], errs[r] = Init(ctx, o...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() { closeAll(comms) })
	return comms
}

// closeAll closes every rank's communicator at once, as the ranks of a
// job do (Close waits for the others).
func closeAll(comms []*Comm) {
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
}

// Start-up calibration runs on the library's own communicator: the
// user's first operation is seq 1, the sixth seq 6, in requests, trace
// lines and errors alike.
func TestUserSequenceNumbersStartAtOne(t *testing.T) {
	clearEnv(t)
	t.Setenv("SPARCML_DEBUG", "TRACE")
	t.Setenv("SPARCML_DEBUG_SUBSYS", "coll")
	var log lineLog
	comms := initJob(t, 2, WithLogger(log.logf))
	errs := onEveryRank(t, comms, 30*time.Second, func(ctx context.Context, c *Comm) error {
		for i := 1; i <= 5; i++ {
			r := StartAllreduce(ctx, c, []float32{1, 2}, Sum)
			if err := r.Wait(ctx); err != nil {
				return err
			}
			if r.Seq() != uint64(i) {
				return fmt.Errorf("operation %d has seq %d", i, r.Seq())
			}
		}
		// The sixth call fails (lengths differ): its error says seq 6.
		err := Allreduce(ctx, c, make([]float32, 3+c.Rank()), Sum)
		if err == nil {
			return fmt.Errorf("mismatched lengths succeeded")
		}
		if !strings.Contains(err.Error(), "allreduce seq 6") {
			return fmt.Errorf("the sixth operation's error does not say seq 6: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
	for r := range 2 {
		traced := log.matching(fmt.Sprintf("[%d] sparcml TRACE coll: allreduce seq ", r))
		require.Len(t, traced, 6, log.String())
		assert.Contains(t, traced[0], "allreduce seq 1: 2 x float32 (8 bytes), algo ")
		assert.Contains(t, traced[5], "allreduce seq 6: ")
		assert.Contains(t, traced[5], "failed: ")
	}
}

// A failure of the start-up calibration names the operation as the
// library's, once: "sparcml: rank 0: start-up barrier seq 1 ...".
func TestCalibrationErrorSaysStartUp(t *testing.T) {
	clearEnv(t)
	comms, err := Local(2)
	require.NoError(t, err)
	defer closeAll(comms)
	comms[1].Abort(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = comms[0].calibrate(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrPeerLost)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "sparcml: rank 0: start-up barrier seq 1"), msg)
	assert.Equal(t, 1, strings.Count(msg, "sparcml:"), msg)
	assert.Equal(t, 1, strings.Count(msg, "rank 0:"), msg)
	// The user's numbering has not moved.
	assert.Equal(t, uint64(0), comms[0].seq)
}
