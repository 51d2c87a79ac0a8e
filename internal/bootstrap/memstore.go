package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStoreClosed is returned by a MemStore once it has been closed.
var ErrStoreClosed = errors.New("store closed")

// MemStore is an in-process Store for tests: the ranks of a job that run
// as goroutines of one process share one MemStore instead of talking to a
// rank-0 server. Like the real store, keys are written once and Get waits
// until the key is set.
type MemStore struct {
	mu      sync.Mutex
	values  map[string][]byte
	changed chan struct{} // closed and replaced on every Set and on Close
	closed  bool
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{values: make(map[string][]byte), changed: make(chan struct{})}
}

// Set stores a copy of value under key. Setting a key twice is an error,
// as with the real store, because it means two ranks claim the same role.
func (s *MemStore) Set(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: set %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("store: set %q: %w", key, ErrStoreClosed)
	}
	if _, dup := s.values[key]; dup {
		return fmt.Errorf("store: set %q: key already set", key)
	}
	s.values[key] = append([]byte(nil), value...)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Get returns a copy of key's value, waiting until it is set, ctx ends or
// the store is closed.
func (s *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		s.mu.Lock()
		v, ok := s.values[key]
		closed, changed := s.closed, s.changed
		s.mu.Unlock()
		if ok {
			return append([]byte(nil), v...), nil
		}
		if closed {
			return nil, fmt.Errorf("store: get %q: %w", key, ErrStoreClosed)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("store: get %q: %w", key, ctx.Err())
		}
	}
}

// Close wakes every waiting Get with ErrStoreClosed. It is idempotent.
// Since a MemStore is shared by all ranks, tests usually close it once
// after every rank is done.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
	return nil
}
