package transporttest

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// caseBudget: rank 1 floods rank 0 with count messages of n bytes, far
// more than the unexpected budget, before rank 0 posts any receive. The
// sender must be held back (not every send completes: what a transport
// buffers for rank 0 is bounded, by the budget and what the network
// itself holds: the count of completed sends stops growing short of
// all), rank 0's memory must not grow with the flood, and
// meanwhile rank 2 and rank 0 keep exchanging messages, as do rank 0 and
// rank 1 in the other direction. Once rank 0 posts the receives, in
// reverse order, everything arrives intact and every send completes.
func caseBudget(c *Case, n, count int) {
	flood := n * count
	// The senders' payloads: a few buffers, reused, so that the flood
	// itself allocates nothing on the sending side.
	srcs := make([][]byte, 4)
	for i := range srcs {
		srcs[i] = pattern(1, 0, tag(4, uint64(i), 0), n)
	}
	before := heapInUse()
	src, dst := c.Ts[1], c.Ts[0]
	sends := make([]*transport.Request, count)
	for i := range sends {
		sends[i] = src.Send(0, tag(4, 1, uint32(i)), desc, srcs[i%len(srcs)])
	}
	time.Sleep(300 * time.Millisecond) // let the flood arrive

	// Other peers and the other direction go on.
	for i := range 10 {
		if err := c.roundTrip(0, 2, tag(4, 2, uint32(2*i)), 64<<10); err != nil {
			c.Errorf("ranks 0 and 2 during the flood: %v", err)
			break
		}
	}
	// More messages than a transport is likely to have in flight to one
	// peer (an RDMA ring's slots), so that the other direction's flow
	// control must keep working while this one is held back.
	back := make([]expected, 100)
	var backSends []*transport.Request
	for i := range back {
		t := tag(4, 3, uint32(i))
		back[i] = expected{src.Recv(0, t, desc, nil), 0, nil, pattern(0, 1, t, 1000)}
		backSends = append(backSends, dst.Send(1, t, desc, back[i].want))
	}
	for i, e := range back {
		c.check(1, e)
		if err := c.wait(backSends[i]); err != nil {
			c.Errorf("rank 0 to the flooding rank 1 during the flood: %v: %v", backSends[i], err)
		}
	}

	// Let the flood go as far as the transport lets it: until the count
	// of completed sends has not grown for a while.
	completed := func() int {
		n := 0
		for _, s := range sends {
			if s.Completed() {
				n++
			}
		}
		return n
	}
	done, since := completed(), time.Now()
	for time.Since(since) < 500*time.Millisecond && done < count && c.Ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if n := completed(); n != done {
			done, since = n, time.Now()
		}
	}
	if done == count {
		c.Errorf("all %d sends of %d bytes (%d in all) completed with no receive posted and a budget of %d: the sender was not held back",
			count, n, flood, Budget)
	}
	if grown := heapInUse() - before; grown > int64(flood)/2 {
		c.Errorf("the heap grew by %d bytes during a flood of %d bytes with a budget of %d: unexpected messages are not bounded", grown, flood, Budget)
	}
	c.Logf("flood of %d x %d bytes: %d sends completed before any receive was posted", count, n, done)

	recvs := make([]*transport.Request, count)
	for i := count - 1; i >= 0; i-- {
		recvs[i] = dst.Recv(1, tag(4, 1, uint32(i)), desc, nil)
	}
	for i, r := range recvs {
		if err := c.wait(r); err != nil {
			c.Errorf("%v: %v", r, err)
			return
		}
		if firstDiff(r.Data(), srcs[i%len(srcs)]) >= 0 {
			c.Errorf("%v: wrong payload", r)
			return
		}
	}
	for _, s := range sends {
		if err := c.wait(s); err != nil {
			c.Errorf("%v: %v", s, err)
			return
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	return int64(st.HeapAlloc)
}

// caseDeadline: a Wait whose context ends returns the context's error and
// leaves the request pending; it completes normally later. Likewise for a
// context that ended before the Wait, and for a send.
func caseDeadline(c *Case) {
	a, b := c.Ts[0], c.Ts[1]
	t := tag(5, 1, 0)
	r := a.Recv(1, t, desc, make([]byte, 100))
	start := time.Now()
	err := c.waitShort(r, 50*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("Wait with a 50 ms deadline and no message: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		c.Errorf("Wait with a 50 ms deadline returned after %v", took)
	}
	if done, _ := r.Test(); done {
		c.Errorf("the receive completed when its Wait's deadline passed")
	}
	cancelled, cancel := context.WithCancel(c.Ctx)
	cancel()
	if err := r.Wait(cancelled); !errors.Is(err, context.Canceled) {
		c.Errorf("Wait with a cancelled context: %v, want context.Canceled", err)
	}
	s := b.Send(0, t, desc, pattern(1, 0, t, 100))
	c.check(0, expected{r, 1, nil, pattern(1, 0, t, 100)})
	if err := c.wait(s); err != nil {
		c.Errorf("%v: %v", s, err)
	}

	// A large send without its receive may wait for it (a rendezvous) or
	// not (buffered); either way a short Wait leaves it intact.
	t = tag(5, 2, 0)
	big := pattern(0, 1, t, 8<<20)
	s = a.Send(1, t, desc, big)
	if err := c.waitShort(s, 50*time.Millisecond); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("a large send's Wait with a short deadline: %v", err)
	}
	r = b.Recv(0, t, desc, nil)
	c.check(1, expected{r, 0, nil, big})
	if err := c.wait(s); err != nil {
		c.Errorf("%v: %v", s, err)
	}
}

// caseProgress: a request completes for a caller who never calls Wait:
// one who selects on Done, and one who only polls Test. A transport that
// makes progress in its waiters must make it without them too.
func caseProgress(c *Case) {
	a, b := c.Ts[0], c.Ts[1]
	for i, n := range []int{100, 1 << 20} {
		t := tag(5, 10, uint32(i))
		r := a.Recv(1, t, desc, nil)
		s := b.Send(0, t, desc, pattern(1, 0, t, n))
		select {
		case <-r.Done():
		case <-c.Ctx.Done():
			c.Errorf("a %d-byte receive watched through Done did not complete", n)
			return
		}
		if firstDiff(r.Data(), pattern(1, 0, t, n)) >= 0 || r.Err() != nil {
			c.Errorf("%v: %v, or a wrong payload", r, r.Err())
		}
		select {
		case <-s.Done():
		case <-c.Ctx.Done():
			c.Errorf("a %d-byte send watched through Done did not complete", n)
		}
	}
	for i, n := range []int{100, 1 << 20} {
		t := tag(5, 11, uint32(i))
		r := a.Recv(1, t, desc, nil)
		s := b.Send(0, t, desc, pattern(1, 0, t, n))
		if !c.eventually(func() bool { done, _ := r.Test(); return done }) {
			c.Errorf("a %d-byte receive polled with Test did not complete", n)
			return
		}
		if firstDiff(r.Data(), pattern(1, 0, t, n)) >= 0 || r.Err() != nil {
			c.Errorf("%v: %v, or a wrong payload", r, r.Err())
		}
		if !c.eventually(func() bool { done, _ := s.Test(); return done }) || s.Err() != nil {
			c.Errorf("a %d-byte send polled with Test: %v", n, s.Err())
		}
	}
}
