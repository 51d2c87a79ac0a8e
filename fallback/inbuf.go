package fallback

import "io"

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
	two  func(a, b []byte) (int, error)
	buf  []byte
	r, w int // buf[r:w] is buffered
}

func newInBuf(src io.Reader, size int) *inBuf {
	return &inBuf{src: src, buf: make([]byte, size)}
}

// Buffered is how many bytes can be read without touching the source.
func (b *inBuf) Buffered() int { return b.w - b.r }

// empty starts a read into the drained buffer.
func (b *inBuf) empty() { b.r, b.w = 0, 0 }

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
