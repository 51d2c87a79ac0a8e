package fallback

import (
	"sync"

	"github.com/sparcml/sparcml/transport"
)

// sendItem is one frame waiting to be written: a header and the caller's
// payload buffers, written as they are (never copied).
type sendItem struct {
	hdr  header
	bufs [][]byte
	req  *transport.Request // nil for control frames (fail-op)
}

// sendItems are recycled: one is needed per message.
var sendItemPool = sync.Pool{New: func() any { return new(sendItem) }}

func newSendItem(h header, bufs [][]byte, req *transport.Request) *sendItem {
	it := sendItemPool.Get().(*sendItem)
	it.hdr, it.bufs, it.req = h, bufs, req
	return it
}

// finish completes the item's request with err and recycles the item.
func (it *sendItem) finish(err error) {
	if it.req != nil {
		it.req.Complete(nil, err)
	}
	*it = sendItem{}
	sendItemPool.Put(it)
}

// A batch is the frames one vectored write carries: small messages queued
// together go out in one system call, but a batch stops growing at
// maxBatchBytes of payload so that a message's completion is not held up
// behind many large ones.
const (
	maxBatch      = 64
	maxBatchBytes = 1 << 20
)

// sendQueue is the unbounded queue between Send and a connection's writer
// goroutine. Send must not block, and the memory behind queued items is
// the callers' own buffers, so the queue holds only small descriptors.
type sendQueue struct {
	mu     sync.Mutex
	items  []*sendItem
	wake   chan struct{} // capacity 1: "the queue changed"
	closed error         // once set, push fails and the writer exits
}

func newSendQueue() *sendQueue {
	return &sendQueue{wake: make(chan struct{}, 1)}
}

// push appends it, or returns the queue's error once it is closed.
func (q *sendQueue) push(it *sendItem) error {
	q.mu.Lock()
	if q.closed != nil {
		err := q.closed
		q.mu.Unlock()
		return err
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *sendQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take waits for items and moves the next batch of them into batch. It
// returns an empty batch once the queue is closed.
func (q *sendQueue) take(batch []*sendItem) []*sendItem {
	for {
		q.mu.Lock()
		if q.closed != nil {
			q.mu.Unlock()
			return batch
		}
		if len(q.items) > 0 {
			n, bytes := 0, uint64(0)
			for n < len(q.items) && n < maxBatch && bytes < maxBatchBytes {
				bytes += q.items[n].hdr.length
				n++
			}
			batch = append(batch, q.items[:n]...)
			rest := copy(q.items, q.items[n:])
			clear(q.items[rest:])
			q.items = q.items[:rest]
			q.mu.Unlock()
			return batch
		}
		q.mu.Unlock()
		<-q.wake
	}
}

// close fails every queued item with err and makes later pushes fail. Only
// the first call has an effect.
func (q *sendQueue) close(err error) {
	q.mu.Lock()
	if q.closed != nil {
		q.mu.Unlock()
		return
	}
	q.closed = err
	pending := q.items
	q.items = nil
	q.mu.Unlock()
	q.signal()
	for _, it := range pending {
		it.finish(err)
	}
}
