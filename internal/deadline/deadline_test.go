package deadline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Operations started close together share a deadline context; each gets
// at least the whole timeout and at most the slack more; another parent
// gets its own, which its release ends; a shared context ends with
// DeadlineExceeded, or at Close. Parents are told apart by their Done
// channel, so any context type works (none is compared).
func TestSharedDeadlines(t *testing.T) {
	const timeout = 640 * time.Millisecond // slack 10 ms
	var s Shared
	parent := context.Background()
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()

	a, releaseA := s.Bound(parent, timeout)
	b, _ := s.Bound(uncomparableCtx{Context: parent}, timeout)
	b2, _ := s.Bound(uncomparableCtx{Context: parent}, timeout)
	after := time.Now()
	assert.True(t, a == b && b == b2, "operations in one slack interval must share a context")
	d, ok := a.Deadline()
	require.True(t, ok)
	assert.False(t, d.Before(after.Add(timeout)), "deadline %v leaves less than the timeout", d.Sub(after))
	assert.False(t, d.After(after.Add(timeout+Slack(timeout))), "deadline %v beyond timeout + slack", d.Sub(after))
	releaseA()
	assert.NoError(t, a.Err(), "releasing one operation must not end the shared context")

	c, releaseC := s.Bound(other, timeout)
	assert.True(t, c != a, "another parent must get its own context")
	cancelOther()
	<-c.Done()
	assert.ErrorIs(t, c.Err(), context.Canceled, "the parent's cancellation reaches the operation's context")
	releaseC()

	own, cancelOwn := context.WithCancel(context.Background())
	defer cancelOwn()
	f, releaseF := s.Bound(own, timeout)
	releaseF()
	assert.ErrorIs(t, f.Err(), context.Canceled, "an operation's own context ends at its release")

	time.Sleep(2 * Slack(timeout))
	e, _ := s.Bound(parent, timeout)
	assert.True(t, e != a, "after the slack a new context is made")
	select {
	case <-a.Done():
		assert.True(t, errors.Is(a.Err(), context.DeadlineExceeded), "expired with %v", a.Err())
	case <-time.After(10 * timeout):
		t.Fatal("a shared deadline context never expired")
	}
	// Whether e is still live when a expires depends on the scheduler on
	// a loaded machine; its deadline being the later one does not.
	de, ok := e.Deadline()
	require.True(t, ok)
	assert.True(t, de.After(d), "the newer context's deadline %v is not after the older one's %v", de, d)
	s.CancelAll()
	<-e.Done()
}

// uncomparableCtx is a context type that == panics on.
type uncomparableCtx struct {
	context.Context
	_ []int
}

type valueKey struct{}

// A shared context carries none of the values of the parent it was made
// from: the operations of other callers share it.
func TestSharedDeadlineCarriesNoValues(t *testing.T) {
	var s Shared
	defer s.CancelAll()
	marked := context.WithValue(context.Background(), valueKey{}, "first caller's")
	a, _ := s.Bound(marked, time.Minute)
	b, _ := s.Bound(context.Background(), time.Minute)
	require.True(t, a == b, "both parents have no Done channel: one shared context")
	assert.Nil(t, b.Value(valueKey{}), "the shared context carries the first caller's value")
}
