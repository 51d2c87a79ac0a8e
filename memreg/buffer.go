// Package memreg provides memory for RDMA: page-aligned buffers outside
// the Go heap (so they never move and the garbage collector never sees
// them), a bounded cache of memory registrations for user buffers, and a
// check of the locked-memory limit that says how to raise it.
package memreg

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Buffer is page-aligned memory mapped outside the Go heap. Its address is
// stable for its lifetime, which is what a memory registration needs.
type Buffer struct {
	mu     sync.Mutex
	b      []byte
	full   []byte // the whole mapping, for Munmap
	locked bool
}

// Alloc maps n bytes (rounded up to whole pages) of zeroed anonymous
// memory. With lock, the pages are also locked in RAM with mlock(2);
// registering them with ibv_reg_mr pins them anyway, so lock is only
// needed for buffers that are not registered.
func Alloc(n int, lock bool) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("memreg: alloc of %d bytes", n)
	}
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("memreg: mmap of %d bytes: %w", size, err)
	}
	dontFork(b)
	buf := &Buffer{b: b[:n:n], full: b}
	if lock {
		if err := unix.Mlock(b); err != nil {
			_ = unix.Munmap(b)
			return nil, fmt.Errorf("memreg: mlock of %d bytes: %w (%s)", size, err, memlockAdvice)
		}
		buf.locked = true
	}
	return buf, nil
}

// Bytes returns the buffer's memory, nil after Free.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

// Len is the usable length asked for in Alloc.
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Free unmaps the buffer. Every registration of it must be closed first.
// A second call is a no-op.
func (b *Buffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b == nil {
		return nil
	}
	full := b.full
	b.b, b.full = nil, nil
	if err := unix.Munmap(full); err != nil {
		return fmt.Errorf("memreg: munmap: %w", err)
	}
	return nil
}
