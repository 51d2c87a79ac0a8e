package sim

import (
	"container/heap"
	"context"
	"errors"

	"github.com/sparcml/sparcml/transport"
)

// ErrDeadlock fails the waits of a job in which every goroutine waits and
// no message is in flight: the collective code would hang on a network.
var ErrDeadlock = errors.New("sim: deadlock: every goroutine waits and nothing is in flight")

// gor is one goroutine of the job, scheduled by the world: it runs only
// while it holds the world (wake), and gives it back when it waits, is
// charged time, or returns.
type gor struct {
	rank  int
	id    uint64 // start order: breaks ties between equal clocks
	clock float64
	wake  chan struct{}
	index int     // in the run queue, -1 when not queued
	since float64 // cpuNow when it last resumed (ComputeMeasured)
}

// event is something the network does at a time: a message reaching a
// link, leaving the sender's NIC, or arriving.
type event struct {
	at   float64
	seq  uint64
	fire func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}

type runQueue []*gor

func (q runQueue) Len() int { return len(q) }
func (q runQueue) Less(i, j int) bool {
	if q[i].clock != q[j].clock {
		return q[i].clock < q[j].clock
	}
	return q[i].id < q[j].id
}
func (q runQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *runQueue) Push(x any) {
	g := x.(*gor)
	g.index = len(*q)
	*q = append(*q, g)
}
func (q *runQueue) Pop() any {
	old := *q
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	g.index = -1
	return g
}

// at schedules fire at virtual time t (not before now).
func (w *World) at(t float64, fire func()) {
	w.seq++
	heap.Push(&w.events, event{at: max(t, w.now), seq: w.seq, fire: fire})
}

// ready puts g in the run queue at its clock.
func (w *World) ready(g *gor) { heap.Push(&w.runq, g) }

// next fires every event due before the earliest runnable goroutine and
// returns that goroutine, the new holder of the world. With nothing left
// it returns nil: the job is over, or deadlocked (its waits then fail with
// ErrDeadlock and it goes on).
func (w *World) next() *gor {
	for {
		if len(w.events) > 0 && (len(w.runq) == 0 || w.events[0].at <= w.runq[0].clock) {
			e := heap.Pop(&w.events).(event)
			w.now = e.at
			e.fire()
			continue
		}
		if len(w.runq) > 0 {
			g := heap.Pop(&w.runq).(*gor)
			w.now = g.clock
			w.cur = g
			return g
		}
		if len(w.waiting) == 0 {
			w.cur = nil
			return nil
		}
		w.failWaits(ErrDeadlock)
	}
}

// failWaits completes every waited-for request with err, in the order
// the waits began (deterministic).
func (w *World) failWaits(err error) {
	reqs := make([]*transport.Request, 0, len(w.waiting))
	for r := range w.waiting {
		reqs = append(reqs, r)
	}
	sortByWaitOrder(reqs, w.waiting)
	for _, r := range reqs {
		r.Complete(nil, err)
		if g, ok := w.waiting[r]; ok { // completed before: wake anyway
			delete(w.waiting, r)
			g.g.clock = w.now
			w.ready(g.g)
		}
	}
}

// switchFrom gives the world to the next goroutine; g (the caller, queued
// or waiting) blocks until it is its turn again. A nil g is a goroutine
// that returned.
func (w *World) switchFrom(g *gor) {
	next := w.next()
	if next == g && g != nil {
		w.resumed(g)
		return
	}
	if next != nil {
		next.wake <- struct{}{}
	} else {
		w.idle <- struct{}{} // the job is over: Run returns
	}
	if g != nil {
		<-g.wake
		w.resumed(g)
	}
}

func (w *World) resumed(g *gor) {
	if w.compute.Mode == ComputeMeasured {
		g.since = cpuNow()
	}
}

// charge moves the current goroutine's clock on by d seconds (the work it
// just did) on a core (Config.Cores) and lets every goroutine and event before it run first.
func (w *World) charge(d float64) {
	g := w.cur
	if d <= 0 || g == nil {
		return
	}
	g.clock = w.cpu.run(g.clock, d)
	w.ready(g)
	w.switchFrom(g)
}

// enter is called at every transport call of the running goroutine: with
// measured compute, the CPU time since it last resumed is its work.
func (w *World) enter() {
	if w.compute.Mode != ComputeMeasured || w.cur == nil {
		return
	}
	d := (cpuNow() - w.cur.since) * w.compute.Factor
	w.charge(d)
}

// wait is every simulated request's waiter: the goroutine gives the world
// up until r completes (notify queues it again).
func (w *World) wait(ctx context.Context, r *transport.Request) error {
	w.enter()
	if r.Completed() {
		return nil
	}
	g := w.cur
	if g == nil {
		return errors.New("sim: a request was waited on outside the simulated job")
	}
	w.waitSeq++
	w.waiting[r] = waiter{g: g, seq: w.waitSeq}
	w.switchFrom(g)
	return nil
}

// notify is every simulated request's completion hook.
func (w *World) notify(r *transport.Request) {
	if wt, ok := w.waiting[r]; ok {
		delete(w.waiting, r)
		wt.g.clock = w.now
		w.ready(wt.g)
	}
}

type waiter struct {
	g   *gor
	seq uint64
}

func sortByWaitOrder(reqs []*transport.Request, waiting map[*transport.Request]waiter) {
	for i := 1; i < len(reqs); i++ {
		for j := i; j > 0 && waiting[reqs[j]].seq < waiting[reqs[j-1]].seq; j-- {
			reqs[j], reqs[j-1] = reqs[j-1], reqs[j]
		}
	}
}

// spawn starts fn as a goroutine of rank at the current time; the
// request completes when fn returns.
func (w *World) spawn(rank int, fn func()) *transport.Request {
	done := w.newRequest(-1, transport.Tag{}, false)
	w.gid++
	g := &gor{rank: rank, id: w.gid, clock: w.now, wake: make(chan struct{}, 1), index: -1}
	w.live++
	go func() {
		<-g.wake
		w.resumed(g)
		defer func() {
			if p := recover(); p != nil {
				w.panics = append(w.panics, p)
			}
			w.enter()
			w.live--
			done.Complete(nil, nil)
			w.switchFrom(nil)
		}()
		fn()
	}()
	w.ready(g)
	return done
}

func (w *World) newRequest(peer int, tag transport.Tag, send bool) *transport.Request {
	r := transport.NewRequest(peer, tag, send)
	w.hook(r)
	return r
}

func (w *World) hook(r *transport.Request) {
	r.SetWaiter(w.wait)
	r.SetNotify(w.notify)
}
