package fallback

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/logging"
	"github.com/sparcml/sparcml/transport"
)

// testTimeout bounds every multi-rank test: a hang is a bug.
const testTimeout = 20 * time.Second

var testToken = []byte("fallback-test-job-secret")

// job is a set of ranks of one test job, all in this process.
type job struct {
	store *bootstrap.MemStore
	ts    []*Transport
	log   *logBuffer
}

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

// logger is a logger of every level writing to l.
func (l *logBuffer) logger() *logging.Logger { return logging.ToPrintf(l.logf) }

func (l *logBuffer) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// startJob starts size ranks over loopback and registers their Close.
func startJob(t testing.TB, size int, mod func(*Config)) *job {
	t.Helper()
	j := &job{store: bootstrap.NewMemStore(), log: &logBuffer{}}
	j.ts = make([]*Transport, size)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.ts[r], errs[r] = New(ctx, j.config(r, size, mod))
		}()
	}
	wg.Wait()
	t.Cleanup(j.close)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	return j
}

func (j *job) config(rank, size int, mod func(*Config)) Config {
	cfg := Config{Rank: rank, Size: size, Store: j.store, Token: testToken, Log: j.log.logger()}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func (j *job) close() {
	for _, tr := range j.ts {
		if tr != nil {
			tr.Close()
		}
	}
	j.store.Close()
}

// checkNoLeaks fails the test if goroutines started during it are still
// running at its end. Register it before anything else, so its cleanup
// runs last.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("goroutine leak: %d goroutines, %d before the test\n%s", n, before, buf)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// waitCtx returns a context bounded by testTimeout.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// reference is random bytes that messages are slices of: the sender sends
// a slice, the receiver compares what arrived with the same slice.
var reference = func() []byte {
	b := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}()

// payload returns the reference slice of message (src, dst, tag) of n bytes.
func payload(src, dst int, tag transport.Tag, n int) []byte {
	off := int((uint64(src)*7919 + uint64(dst)*104729 + tag.Seq*1299709 + uint64(tag.Step)*15485863) % uint64(len(reference)-n+1))
	return reference[off : off+n]
}

var testDesc = transport.Desc{Kind: transport.OpP2P, DType: 1, Count: 42}

// waitAll waits for every request and returns the first error, naming it.
func waitAll(ctx context.Context, reqs []*transport.Request) error {
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			return fmt.Errorf("%v: %w", r, err)
		}
	}
	return nil
}
