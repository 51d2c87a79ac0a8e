//go:build linux

package shm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

var testToken = []byte("shm-test-job-secret")

const testTimeout = 30 * time.Second

// logBuffer collects the transports' diagnostics so tests can check them.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// startJob starts size ranks in this process, all on one host, connected
// through an in-memory store; mod adjusts each rank's configuration. The
// transports are closed when the test ends.
func startJob(t testing.TB, size int, log *logBuffer, mod func(*Config)) []*Transport {
	t.Helper()
	store := bootstrap.NewMemStore()
	ts := make([]*Transport, size)
	errs := make([]error, size)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for r := range size {
		cfg := Config{Rank: r, Size: size, Store: store, Token: testToken}
		if log != nil {
			cfg.Logf = log.logf
		}
		if mod != nil {
			mod(&cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = New(ctx, cfg)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tr := range ts {
			if tr != nil {
				tr.Close()
			}
		}
		store.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	return ts
}

func asTransports(ts []*Transport) []transport.Transport {
	out := make([]transport.Transport, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// fixedStore answers one key with a fixed value and accepts every Set.
type fixedStore struct{ key, value string }

func newFixedStore(key, value string) fixedStore { return fixedStore{key, value} }

func (s fixedStore) Set(ctx context.Context, key string, value []byte) error { return nil }
func (s fixedStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		return []byte(s.value), nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s fixedStore) Close() error { return nil }
