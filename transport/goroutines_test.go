package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// scheduled is a transport whose capabilities carry the scheduling
// fields, counting their calls, and a failure capability a view must
// not pass on.
type scheduled struct {
	*transport.InMemory
	goes, signals, work int
	caps                transport.Capabilities
}

func newScheduled() *scheduled {
	s := &scheduled{InMemory: transport.NewInMemory(1)[0]}
	s.caps = transport.Capabilities{
		SegmentBytes: 4096,
		FailLocal:    func(error) {},
		Go: func(fn func()) *transport.Request {
			s.goes++
			fn()
			r := transport.NewRequest(-1, transport.Tag{}, false)
			r.Complete(nil, nil)
			return r
		},
		NewSignal: func() *transport.Request { s.signals++; return transport.NewRequest(-1, transport.Tag{}, false) },
		Work:      func(transport.Kernel, int) { s.work++ },
	}
	return s
}

func (s *scheduled) Caps() transport.Capabilities { return s.caps }

// view is a wrapper reporting ViewCaps of its parent, as the collectives'
// group and the derived communicators' transports do.
type view struct{ transport.Transport }

func (v view) Caps() transport.Capabilities { return transport.ViewCaps(v.Transport) }

// Go, NewSignal and Work use a transport's scheduling fields, through any
// number of views, and a view reports none of the parent's failure
// capabilities nor its segment size.
func TestSchedulingThroughViews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := newScheduled()
	defer s.Close()
	v := view{view{s}}
	ran := false
	if err := transport.Go(v, func() { ran = true }).Wait(ctx); err != nil || !ran {
		t.Fatalf("Go through views: ran %v, err %v", ran, err)
	}
	transport.NewSignal(v)
	transport.Work(v, transport.KernelMerge, 10)
	if s.goes != 1 || s.signals != 1 || s.work != 1 {
		t.Errorf("the parent's Go, NewSignal, Work ran %d, %d, %d times, want 1 each", s.goes, s.signals, s.work)
	}
	if c := v.Caps(); c.FailLocal != nil || c.SegmentBytes != 0 {
		t.Errorf("a view reports the parent's FailLocal (%v) or segment size (%d)", c.FailLocal != nil, c.SegmentBytes)
	}
}

// Without scheduling fields, Go is a plain goroutine, NewSignal a plain
// request and Work nothing.
func TestSchedulingPlain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := transport.NewInMemory(1)[0]
	defer tr.Close()
	started := make(chan struct{})
	release := make(chan struct{})
	r := transport.Go(tr, func() { close(started); <-release })
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("Go did not start fn on a goroutine of its own")
	}
	if done, _ := r.Test(); done {
		t.Fatal("Go's request completed before fn returned")
	}
	close(release)
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("Go's request: %v", err)
	}
	sig := transport.NewSignal(tr)
	want := errors.New("signalled")
	go sig.Complete(nil, want)
	if err := sig.Wait(ctx); !errors.Is(err, want) {
		t.Errorf("a signal's Wait = %v, want %v", err, want)
	}
	transport.Work(tr, transport.KernelReduce, 1)
}
