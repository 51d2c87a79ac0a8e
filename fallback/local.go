package fallback

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// NewLocal starts a whole job of size ranks in this process, connected
// over loopback TCP through an in-memory store and a fresh random token:
// for tests and single-machine benchmarks that want the real TCP path.
// tune, if not nil, adjusts each rank's Config (Rank, Size, Store and
// Token are already set). On error every started rank is closed.
func NewLocal(ctx context.Context, size int, tune func(*Config)) ([]*Transport, error) {
	if size < 1 {
		return nil, fmt.Errorf("%w: tcp: job size %d", transport.ErrInvalid, size)
	}
	store := bootstrap.NewMemStore()
	defer store.Close() // only needed during setup
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	ts := make([]*Transport, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, Size: size, Store: store, Token: token}
			if tune != nil {
				tune(&cfg)
			}
			ts[r], errs[r] = New(ctx, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, tr := range ts {
				if tr != nil {
					tr.Close()
				}
			}
			return nil, err
		}
	}
	return ts, nil
}
