package wire

import "sync"

// Sticky is a transport's sticky error: the first failure, which every
// later request gets, and a channel closed once it is set
// (transport.Capabilities.Failed). The zero value has no error.
//
// Its lock is its own and is never held while taking another, so a
// transport may read it under its own lock.
type Sticky struct {
	mu     sync.Mutex
	err    error
	failed chan struct{}
}

// Set records err unless an error is already set, and reports whether it
// did.
func (s *Sticky) Set(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	if s.failed == nil {
		s.failed = make(chan struct{})
	}
	close(s.failed)
	return true
}

// Err returns the error, nil before Set.
func (s *Sticky) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Failed returns the channel closed once the error is set; every call
// returns the same one.
func (s *Sticky) Failed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = make(chan struct{})
	}
	return s.failed
}
