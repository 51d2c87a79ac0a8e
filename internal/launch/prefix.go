package launch

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// prefixWriter prefixes each line a rank writes with "[rank] ", writing
// whole lines so ranks' output does not interleave mid-line. A line ended
// by '\r' (a progress indicator) is passed through at once.
type prefixWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix []byte
	buf    []byte
}

func newPrefixWriter(w io.Writer, mu *sync.Mutex, rank int, prefix bool) io.Writer {
	p := &prefixWriter{w: w, mu: mu}
	if prefix {
		p.prefix = []byte(fmt.Sprintf("[%d] ", rank))
	}
	return p
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexAny(p.buf, "\n\r")
		if i < 0 {
			break
		}
		p.emit(p.buf[:i+1])
		p.buf = p.buf[i+1:]
	}
	// Bound the partial line kept in memory.
	if len(p.buf) > 64<<10 {
		p.emit(p.buf)
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

func (p *prefixWriter) emit(line []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.prefix) > 0 {
		p.w.Write(append(append([]byte{}, p.prefix...), line...))
		return
	}
	p.w.Write(line)
}

func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.emit(append(p.buf, '\n'))
		p.buf = nil
	}
}

func flushWriter(w io.Writer) {
	if p, ok := w.(*prefixWriter); ok {
		p.flush()
	}
}
