package fallback

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
)

// A flood of strangers during set-up costs one "refused connection"
// warning (the limiter's interval is far longer than the test), and the
// mesh still completes; a set-up that completes logs no refusal of its own.
func TestStrangerRefusalsRateLimited(t *testing.T) {
	j := &job{store: bootstrap.NewMemStore(), log: &logBuffer{}}
	const size = 2
	j.ts = make([]*Transport, size)
	t.Cleanup(j.close)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.ts[r], errs[r] = New(ctx, j.config(r, size, nil))
		}()
	}
	start(0) // listens for rank 1, which comes after the strangers
	const strangers = 20
	for i := 0; i < strangers; i++ {
		p, err := dialRaw(ctx, j.store, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.join([]byte("not the job secret"), hello{rank: 1, size: size, conn: 0, connsPerPeer: 1})
		p.nc.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for j.log.count("refused connection") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start(1)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	if n := j.log.count("refused connection"); n != 1 {
		t.Errorf("%d refusal lines for %d strangers within one interval, want 1:\n%s", n, strangers, j.log)
	}
	exchangeAllPairs(t, j, 1, 2)
}

func (l *logBuffer) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}
