//go:build linux

package shm

import "sync/atomic"

// A ring is a byte stream from one writer process to one reader process
// in shared memory: the writer copies bytes in at head and publishes head
// once they are in place; the reader copies them out at tail and
// publishes tail once it no longer needs them. Both counters only grow, so
// head - tail is what is waiting and size - (head - tail) the room.

// ringWords are the shared words of one ring (see layout.go).
type ringWords struct {
	data      []byte
	size      uint64
	head      *uint64
	tail      *uint64
	wantSpace *uint32
}

func ringAt(mem []byte, off, ringSize int) ringWords {
	return ringWords{
		data:      mem[off+pageSize : off+pageSize+ringSize],
		size:      uint64(ringSize),
		head:      word64(mem, off+offHead),
		tail:      word64(mem, off+offTail),
		wantSpace: word32(mem, off+offWantSpace),
	}
}

// outRing is the writer's side.
type outRing struct {
	ringWords
	pos       uint64 // next byte to write
	published uint64 // head as last stored
}

// room is how many bytes can be written now.
func (r *outRing) room() uint64 { return r.size - (r.pos - atomic.LoadUint64(r.tail)) }

// put copies b in at pos (b must fit in room).
func (r *outRing) put(b []byte) {
	for len(b) > 0 {
		i := r.pos & (r.size - 1)
		n := copy(r.data[i:], b)
		b = b[n:]
		r.pos += uint64(n)
	}
}

// skip leaves n bytes (padding) as they are.
func (r *outRing) skip(n uint64) { r.pos += n }

// publish makes everything put so far visible to the reader, and reports
// whether there was anything new.
func (r *outRing) publish() bool {
	if r.pos == r.published {
		return false
	}
	atomic.StoreUint64(r.head, r.pos)
	r.published = r.pos
	return true
}

// inRing is the reader's side.
type inRing struct {
	ringWords
	pos      uint64 // next byte to read
	released uint64 // tail as last stored
}

// waiting is how many bytes the writer has published and the reader not
// yet read; ok is false when the writer's head is not a possible one (a
// corrupt ring).
func (r *inRing) waiting() (n uint64, ok bool) {
	n = atomic.LoadUint64(r.head) - r.pos
	return n, n <= r.size
}

// peek returns the next n bytes without copying, when they do not wrap
// (a header, which starts on a 64-byte boundary).
func (r *inRing) peek(n uint64) []byte {
	i := r.pos & (r.size - 1)
	return r.data[i : i+n]
}

// get copies len(b) bytes out at pos.
func (r *inRing) get(b []byte) {
	for len(b) > 0 {
		i := r.pos & (r.size - 1)
		n := copy(b, r.data[i:])
		b = b[n:]
		r.pos += uint64(n)
	}
}

func (r *inRing) skip(n uint64) { r.pos += n }

// release gives the bytes read so far back to the writer, and reports
// whether the writer waits for room (it is then to be woken).
func (r *inRing) release() (writerWaits bool) {
	if r.pos == r.released {
		return false
	}
	atomic.StoreUint64(r.tail, r.pos)
	r.released = r.pos
	return atomic.LoadUint32(r.wantSpace) != 0 && atomic.SwapUint32(r.wantSpace, 0) != 0
}
