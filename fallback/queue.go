package fallback

import (
	"sync"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// sendItem is one frame waiting to be written: a header and the caller's
// payload buffers, written as they are (never copied).
type sendItem struct {
	hdr  wire.Header
	bufs [][]byte
	req  *transport.Request // nil for control frames (fail-op)
	off  int                // bytes of the frame (header included) already written
}

// sendItems are recycled: one is needed per message.
var sendItemPool = sync.Pool{New: func() any { return new(sendItem) }}

func newSendItem(h wire.Header, bufs [][]byte, req *transport.Request) *sendItem {
	it := sendItemPool.Get().(*sendItem)
	it.hdr, it.bufs, it.req, it.off = h, bufs, req, 0
	return it
}

// frameLen is the size of the whole frame on the wire.
func (it *sendItem) frameLen() int { return wire.HeaderSize + int(it.hdr.Length) }

// finish completes the item's request with err and recycles the item.
func (it *sendItem) finish(err error) {
	if it.req != nil {
		it.req.Complete(nil, err)
	}
	*it = sendItem{}
	sendItemPool.Put(it)
}

// appendFrame appends to iov the parts of it still to be written: the
// encoded header hdr (wire.HeaderSize bytes) and the payload buffers, skipping
// the it.off bytes already on the wire.
func appendFrame(iov [][]byte, hdr []byte, it *sendItem) [][]byte {
	skip := it.off
	add := func(b []byte) {
		if skip >= len(b) {
			skip -= len(b)
			return
		}
		iov = append(iov, b[skip:])
		skip = 0
	}
	add(hdr)
	for _, b := range it.bufs {
		add(b)
	}
	return iov
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
//
// The queue also decides who may write to the socket. When nothing is
// queued and nobody is writing, Send claims the socket (claimDirect) and
// writes the frame itself, as far as the kernel takes it without waiting:
// a message that fits the socket buffer then costs no goroutine hand-off
// at all. Whatever the kernel does not take is handed to the writer
// goroutine as the partial frame, which goes out before anything else.
type sendQueue struct {
	mu    sync.Mutex
	items []*sendItem
	wake  chan struct{} // capacity 1: "the queue changed"
	// closed, once set, makes push fail; the writer exits once nothing
	// is being written.
	closed error
	// owned: the writer goroutine or a Send caller is writing to the
	// socket; nobody else may start.
	owned bool
	// partial is a frame a caller began writing directly. Its first bytes
	// are on the wire, so it must be finished (or fail with the
	// connection) even if the queue closes in the meantime: dropping it
	// would leave the stream cut inside a frame.
	partial *sendItem
	// werr is the error a caller's direct write ended with; the writer
	// reports it as its own write failure, with partial.
	werr error
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

// claimDirect reports whether the caller may write a frame to the socket
// itself: the queue is open, empty, and nobody is writing. On true the
// caller owns the socket until it calls releaseDirect. On false with a nil
// error, it has been queued for the writer.
func (q *sendQueue) claimDirect(it *sendItem) (bool, error) {
	q.mu.Lock()
	if q.closed != nil {
		err := q.closed
		q.mu.Unlock()
		return false, err
	}
	if q.owned || q.partial != nil || len(q.items) > 0 {
		// Someone is ahead: queue behind them to keep the order.
		q.items = append(q.items, it)
		q.mu.Unlock()
		q.signal()
		return false, nil
	}
	q.owned = true
	q.mu.Unlock()
	return true, nil
}

// releaseDirect ends a caller's ownership of the socket. rest, if not nil,
// is the frame the caller could not finish (werr: why), which the writer
// takes over.
func (q *sendQueue) releaseDirect(rest *sendItem, werr error) {
	q.mu.Lock()
	q.owned = false
	q.partial, q.werr = rest, werr
	// Wake the writer if it has anything to do: the rest of the frame,
	// frames queued behind it meanwhile, or exiting after a close.
	wake := rest != nil || len(q.items) > 0 || q.closed != nil
	q.mu.Unlock()
	if wake {
		q.signal()
	}
}

func (q *sendQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take waits until the socket is free and there is something to write,
// claims the socket for the writer and moves the next batch into batch:
// the partial frame first, if any, with werr if writing it already
// failed. It returns an empty batch once the queue is closed and nothing
// is left to finish.
func (q *sendQueue) take(batch []*sendItem) ([]*sendItem, error) {
	for {
		q.mu.Lock()
		if !q.owned {
			var werr error
			if q.partial != nil {
				batch = append(batch, q.partial)
				werr = q.werr
				q.partial, q.werr = nil, nil
			}
			if q.closed != nil && len(batch) == 0 {
				q.mu.Unlock()
				return batch, nil
			}
			if q.closed == nil && werr == nil && len(q.items) > 0 {
				n, bytes := 0, uint64(0)
				for _, it := range batch {
					bytes += it.hdr.Length
				}
				for n < len(q.items) && len(batch) < maxBatch && bytes < maxBatchBytes {
					bytes += q.items[n].hdr.Length
					batch = append(batch, q.items[n])
					n++
				}
				rest := copy(q.items, q.items[n:])
				clear(q.items[rest:])
				q.items = q.items[:rest]
			}
			if len(batch) > 0 {
				q.owned = true
				q.mu.Unlock()
				return batch, werr
			}
		}
		q.mu.Unlock()
		<-q.wake
	}
}

// release ends the writer's ownership of the socket after a batch.
func (q *sendQueue) release() {
	q.mu.Lock()
	q.owned = false
	q.mu.Unlock()
}

// close fails every queued item with err and makes later pushes fail. Only
// the first call has an effect. A partial frame is left to the writer.
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
