package transport

import (
	"context"
	"testing"
	"time"
)

// A poller set by the transport runs in the waiting goroutine and may
// complete the request itself; one that gives up leaves Wait blocking.
func TestRequestPoller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r := NewRequest(1, Tag{}, false)
	calls := 0
	r.SetPoller(func(done <-chan struct{}) {
		calls++
		r.Complete([]byte("x"), nil)
		<-done
	})
	if err := r.Wait(ctx); err != nil || calls != 1 || string(r.Data()) != "x" {
		t.Fatalf("Wait = %v after %d poller calls, data %q", err, calls, r.Data())
	}

	r = NewRequest(1, Tag{}, false)
	r.SetPoller(func(done <-chan struct{}) {}) // gives up at once
	go func() {
		time.Sleep(10 * time.Millisecond)
		r.Complete(nil, nil)
	}()
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	r = NewRequest(1, Tag{}, false)
	r.SetPoller(func(done <-chan struct{}) {})
	short, cancel2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel2()
	if err := r.Wait(short); err != context.DeadlineExceeded {
		t.Fatalf("Wait = %v, want the context's error", err)
	}
}
