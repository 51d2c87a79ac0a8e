package fallback

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// connCongestion returns the congestion control of every connection of tr.
func connCongestion(t *testing.T, tr *Transport) []string {
	t.Helper()
	var algos []string
	for _, list := range tr.peers {
		for _, c := range list {
			rc, err := c.nc.SyscallConn()
			require.NoError(t, err)
			var algo string
			var gerr error
			require.NoError(t, rc.Control(func(fd uintptr) {
				algo, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
			}))
			require.NoError(t, gerr)
			algos = append(algos, algo)
		}
	}
	return algos
}

// TestCongestionOnLoopback: by default no connection within the host
// paces (whatever the system's default), and a named algorithm is set on
// every connection.
func TestCongestionOnLoopback(t *testing.T) {
	j := startJob(t, 3, nil)
	for r, tr := range j.ts {
		for _, algo := range connCongestion(t, tr) {
			require.False(t, paces(algo), "rank %d: a loopback connection uses %s", r, algo)
		}
	}
	if sys, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control"); err == nil && paces(strings.TrimSpace(string(sys))) {
		require.True(t, j.log.contains("paces sends"), "auto switched without saying so:\n%s", j.log)
	}

	j2 := startJob(t, 2, func(c *Config) { c.Congestion = "reno" }) // reno is built into every kernel
	for r, tr := range j2.ts {
		for _, algo := range connCongestion(t, tr) {
			require.Equal(t, "reno", algo, "rank %d", r)
		}
	}
}

// TestCongestionUnknown: an algorithm the kernel does not have fails
// set-up with an error naming it, on every rank, before the deadline.
func TestCongestionUnknown(t *testing.T) {
	checkNoLeaks(t)
	j := &job{store: bootstrap.NewMemStore(), log: &logBuffer{}}
	defer j.store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			tr, err := New(ctx, j.config(r, 2, func(c *Config) { c.Congestion = "nosuchcc" }))
			if tr != nil {
				tr.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		err := <-errs
		require.ErrorContains(t, err, `"nosuchcc"`)
	}
}
