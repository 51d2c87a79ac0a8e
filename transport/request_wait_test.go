package transport

import (
	"context"
	"testing"
	"time"
)

// A waiter set by the transport runs in the waiting goroutine and may
// complete the request itself; one that only blocks (AwaitRequest) sees a
// completion from elsewhere; a context ending is returned as is, unless
// the request completed meanwhile.
func TestRequestWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r := NewRequest(1, Tag{}, false)
	calls := 0
	r.SetWaiter(func(ctx context.Context, r *Request) error {
		calls++
		r.Complete([]byte("x"), nil)
		return AwaitRequest(ctx, r)
	})
	if err := r.Wait(ctx); err != nil || calls != 1 || string(r.Data()) != "x" {
		t.Fatalf("Wait = %v after %d waiter calls, data %q", err, calls, r.Data())
	}

	r = NewRequest(1, Tag{}, false)
	r.SetWaiter(AwaitRequest)
	go func() {
		time.Sleep(10 * time.Millisecond)
		r.Complete(nil, nil)
	}()
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	r = NewRequest(1, Tag{}, false)
	r.SetWaiter(AwaitRequest)
	short, cancel2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel2()
	if err := r.Wait(short); err != context.DeadlineExceeded {
		t.Fatalf("Wait = %v, want the context's error", err)
	}

	r = NewRequest(1, Tag{}, false)
	r.SetWaiter(func(ctx context.Context, r *Request) error {
		r.Complete(nil, ErrAborted) // completes as the context ends
		return context.Canceled
	})
	if err := r.Wait(ctx); err != ErrAborted {
		t.Fatalf("Wait = %v, want the request's own error when it completed", err)
	}
}
