package sparcml

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
// gets its own; a shared context ends with DeadlineExceeded, or at Close.
func TestSharedDeadlines(t *testing.T) {
	const timeout = 640 * time.Millisecond // slack 10 ms
	var s sharedDeadlines
	parent := context.Background()
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()

	a := s.bound(parent, timeout)
	b := s.bound(parent, timeout)
	after := time.Now()
	assert.True(t, a == b, "two operations in one slack interval must share a context")
	d, ok := a.Deadline()
	require.True(t, ok)
	assert.False(t, d.Before(after.Add(timeout)), "deadline %v leaves less than the timeout", d.Sub(after))
	assert.False(t, d.After(after.Add(timeout+deadlineSlack(timeout))), "deadline %v beyond timeout + slack", d.Sub(after))

	c := s.bound(other, timeout)
	assert.True(t, c != a, "another parent must get its own context")
	cancelOther()
	<-c.Done()
	assert.ErrorIs(t, c.Err(), context.Canceled, "the parent's cancellation reaches the shared context")

	time.Sleep(2 * deadlineSlack(timeout))
	e := s.bound(parent, timeout)
	assert.True(t, e != a, "after the slack a new context is made")
	select {
	case <-a.Done():
		assert.True(t, errors.Is(a.Err(), context.DeadlineExceeded), "expired with %v", a.Err())
	case <-time.After(10 * timeout):
		t.Fatal("a shared deadline context never expired")
	}
	assert.NoError(t, e.Err(), "the newer context must still be live")
	s.cancelAll()
	<-e.Done()
}

// The default timeout still fails an operation nobody completes.
func TestDefaultTimeoutStillApplies(t *testing.T) {
	comms, err := Local(2, WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	err = Recv(context.Background(), comms[0], make([]float32, 1), 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
}
