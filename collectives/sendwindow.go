package collectives

import "github.com/sparcml/sparcml/transport"

// sendWindow cycles encoded messages through a few pool-backed slots: a
// slot is reused once the send that used it has completed, so at most that
// many sends are in flight and the scratch memory is a few segments, not
// the whole encoded vector. Sends never wait on the
// receiver's progress (all receives are posted up front), so waiting for
// a slot cannot deadlock.
type sendWindow struct {
	op   *Op
	buf  []byte
	slot int
	reqs []*transport.Request
	next int
}

func newSendWindow(op *Op, slot, slots int) *sendWindow {
	return &sendWindow{op: op, buf: op.Pool.Get(slots * slot), slot: slot,
		reqs: make([]*transport.Request, slots)}
}

// acquire waits until the next slot is free and returns it.
func (w *sendWindow) acquire() ([]byte, error) {
	i := w.next % len(w.reqs)
	if err := w.op.Wait(w.reqs[i]); err != nil {
		return nil, err
	}
	w.reqs[i] = nil
	return w.buf[i*w.slot : (i+1)*w.slot : (i+1)*w.slot], nil
}

// push records the send that uses the slot last acquired.
func (w *sendWindow) push(req *transport.Request) {
	w.reqs[w.next%len(w.reqs)] = req
	w.next++
}

// drain waits for every send in flight.
func (w *sendWindow) drain() error { return w.op.Wait(w.reqs...) }

// release returns the slots to the pool; only after drain succeeded.
func (w *sendWindow) release() { w.op.Pool.Put(w.buf) }
