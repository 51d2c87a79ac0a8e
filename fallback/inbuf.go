package fallback

import (
	"io"

	"github.com/sparcml/sparcml/transport"
)

// inBuf is the buffered reader in front of a connection's socket, like a
// bufio.Reader with one addition: a payload at least as large as the
// buffer is read straight into its destination, and on the socket that
// read is a readv into the destination and then the (empty) buffer, so the
// system call that ends one payload also fetches the next frame's header
// when frames stream back to back. Together with the reader's lazy reset
// of the low-water mark, a large message then costs the reader two system
// calls (set the mark, read) instead of four.
type inBuf struct {
	src io.Reader
	// two, if not nil, reads into a and then b with one system call and
	// returns how many bytes it read in all (at least one, or an error).
	two func(a, b []byte) (int, error)
	// three is two with three buffers (see fillAround).
	three func(a, b, c []byte) (int, error)
	buf   []byte
	r, w  int // buf[r:w] is buffered
	// home is the buffer's own array while buf is a larger one that
	// unread needed (nil otherwise); it comes back once buf is drained.
	home []byte
}

func newInBuf(src io.Reader, size int) *inBuf {
	return &inBuf{src: src, buf: make([]byte, size)}
}

// size is the buffer's own size.
func (b *inBuf) size() int {
	if b.home != nil {
		return len(b.home)
	}
	return len(b.buf)
}

// Buffered is how many bytes can be read without touching the source.
func (b *inBuf) Buffered() int { return b.w - b.r }

// empty starts a read into the drained buffer: back to its own array if
// unread had to borrow a larger one.
func (b *inBuf) empty() {
	b.r, b.w = 0, 0
	if b.home != nil {
		transport.PutBuf(b.buf)
		b.buf, b.home = b.home, nil
	}
}

// fill reads at least one byte into the empty buffer.
func (b *inBuf) fill() error {
	b.empty()
	n, err := b.src.Read(b.buf)
	if n < 0 || n > len(b.buf) {
		return io.ErrNoProgress // a broken reader; never a socket
	}
	b.w = n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Read reads up to len(p) bytes: buffered bytes first; with the buffer
// empty, a p at least as large as the buffer is read directly.
func (b *inBuf) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= len(b.buf) {
			return b.readDirect(p)
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// readDirect reads into p with the buffer empty; with two, bytes beyond p
// land in the buffer.
func (b *inBuf) readDirect(p []byte) (int, error) {
	b.empty()
	if b.two == nil {
		return b.src.Read(p)
	}
	n, err := b.two(p, b.buf)
	if n < 0 || n > len(p)+len(b.buf) {
		return 0, io.ErrNoProgress
	}
	if n <= len(p) {
		return n, err
	}
	b.w = n - len(p)
	return len(p), err
}

// Skip skips up to n bytes, at least one unless it fails, reading the
// source only when nothing is buffered.
func (b *inBuf) Skip(n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	if b.r == b.w {
		if err := b.fill(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	k := min(n, b.w-b.r)
	b.r += k
	return k, nil
}

// fillAround reads, with nothing buffered, into head, then mid, then the
// buffer, with one system call; it returns how many bytes it read in all
// (those beyond head and mid are buffered). It needs three.
func (b *inBuf) fillAround(head, mid []byte) (int, error) {
	b.empty()
	n, err := b.three(head, mid, b.buf)
	if n < 0 || n > len(head)+len(mid)+len(b.buf) {
		return 0, io.ErrNoProgress
	}
	if k := len(head) + len(mid); n > k {
		b.w = n - k
	}
	return n, err
}

// unread puts p in front of the buffered bytes, to be read again: the
// bytes a speculative read put somewhere else (see fillAround). If they do
// not fit, the buffer borrows a larger array until it is drained.
func (b *inBuf) unread(p []byte) {
	if len(p) == 0 {
		return
	}
	if b.r >= len(p) {
		b.r -= len(p)
		copy(b.buf[b.r:], p)
		return
	}
	n := len(p) + b.w - b.r
	borrow := n > len(b.buf)
	dst := b.buf
	if borrow {
		dst = transport.GetBuf(n)
	}
	copy(dst[len(p):], b.buf[b.r:b.w]) // may overlap: copy moves
	copy(dst, p)
	if borrow {
		if b.home == nil {
			b.home = b.buf
		} else {
			transport.PutBuf(b.buf) // an earlier borrowed array
		}
		b.buf = dst
	}
	b.r, b.w = 0, n
}
