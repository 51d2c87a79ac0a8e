package memreg

import (
	"container/list"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// Region is one registration of a range of memory (a *verbs.MR).
type Region interface {
	Close() error
}

// Registrar registers memory. The RDMA transport passes a protection
// domain; tests pass a fake.
type Registrar[R Region] interface {
	Register(b []byte) (R, error)
}

// RegistrarFunc adapts a function to Registrar.
type RegistrarFunc[R Region] func(b []byte) (R, error)

// Register calls f.
func (f RegistrarFunc[R]) Register(b []byte) (R, error) { return f(b) }

// ErrCacheClosed is returned by Acquire after Close.
var ErrCacheClosed = errors.New("memreg: registration cache closed")

// Cache keeps registrations of user buffers so that a buffer used again
// (the usual case: collectives reuse their gradients and scratch space) is
// not registered again. A lookup finds a registration whose range covers
// the whole buffer. Unused registrations are evicted least recently used
// first once there are more than MaxEntries or more than MaxBytes
// registered, and deregistered on eviction. Registrations in use are
// never evicted, so the bounds can be exceeded while many are in use.
//
// Go heap buffers are kept alive and pinned (runtime.Pinner) while they
// are registered: the device writes to their physical pages, so the
// object must neither move nor be freed and reused while the
// registration exists. Buffers outside the Go heap (Alloc, mmap) must not
// be unmapped while registered: call Invalidate before unmapping them.
type Cache[R Region] struct {
	reg        Registrar[R]
	maxEntries int
	maxBytes   int64

	mu     sync.Mutex
	sorted []*entry[R] // by start address
	lru    list.List   // unused entries, most recently used at the front
	bytes  int64
	maxLen uintptr // longest registered range, bounds the lookup scan
	closed bool
	stats  CacheStats
}

// CacheStats counts cache activity.
type CacheStats struct {
	Hits, Misses, Evictions, Entries int
	Bytes                            int64
}

type entry[R Region] struct {
	start, end uintptr
	region     R
	refs       int
	elem       *list.Element // in lru while refs == 0
	mem        []byte        // keeps a Go heap object alive
	pin        runtime.Pinner
	dead       bool // removed from the index; close on last release
}

// NewCache returns a cache over reg bounded by maxEntries registrations
// and maxBytes registered bytes (0 for no bound on either).
func NewCache[R Region](reg Registrar[R], maxEntries int, maxBytes int64) *Cache[R] {
	return &Cache[R]{reg: reg, maxEntries: maxEntries, maxBytes: maxBytes}
}

// Handle is a registration in use. Release it when the device is done
// with the memory.
type Handle[R Region] struct {
	c *Cache[R]
	e *entry[R]
}

// Region is the registration covering the buffer.
func (h Handle[R]) Region() R { return h.e.region }

// Release returns the registration to the cache.
func (h Handle[R]) Release() {
	if h.c != nil {
		h.c.release(h.e)
	}
}

func span(b []byte) (uintptr, uintptr) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return start, start + uintptr(len(b))
}

// Acquire returns a registration covering b, registering b on a miss.
func (c *Cache[R]) Acquire(b []byte) (Handle[R], error) {
	if len(b) == 0 {
		return Handle[R]{}, fmt.Errorf("memreg: cannot register an empty buffer")
	}
	start, end := span(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Handle[R]{}, ErrCacheClosed
	}
	if e := c.lookup(start, end); e != nil {
		c.stats.Hits++
		c.use(e)
		return Handle[R]{c, e}, nil
	}
	c.stats.Misses++
	// Make room first so the new registration does not push the process
	// over its locked-memory limit.
	c.evict(1, len(b))
	e := &entry[R]{start: start, end: end, mem: b}
	e.pin.Pin(unsafe.SliceData(b))
	r, err := c.reg.Register(b)
	if err != nil {
		e.pin.Unpin()
		return Handle[R]{}, err
	}
	e.region = r
	e.refs = 1
	c.insert(e)
	return Handle[R]{c, e}, nil
}

// lookup finds a live entry covering [start, end).
func (c *Cache[R]) lookup(start, end uintptr) *entry[R] {
	i := sort.Search(len(c.sorted), func(i int) bool { return c.sorted[i].start > start })
	for i--; i >= 0; i-- {
		e := c.sorted[i]
		if e.end >= end {
			return e
		}
		if e.start+c.maxLen < end {
			break // no earlier entry is long enough to cover the range
		}
	}
	return nil
}

func (c *Cache[R]) use(e *entry[R]) {
	if e.refs == 0 && e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
	e.refs++
}

func (c *Cache[R]) insert(e *entry[R]) {
	i := sort.Search(len(c.sorted), func(i int) bool { return c.sorted[i].start > e.start })
	c.sorted = append(c.sorted, nil)
	copy(c.sorted[i+1:], c.sorted[i:])
	c.sorted[i] = e
	c.bytes += int64(e.end - e.start)
	c.maxLen = max(c.maxLen, e.end-e.start)
}

func (c *Cache[R]) remove(e *entry[R]) {
	for i, x := range c.sorted {
		if x == e {
			c.sorted = append(c.sorted[:i], c.sorted[i+1:]...)
			break
		}
	}
	c.bytes -= int64(e.end - e.start)
	e.dead = true
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
}

// evict drops unused entries, oldest first, until entries more
// registrations of n bytes in all fit the bounds.
func (c *Cache[R]) evict(entries, n int) {
	for c.lru.Len() > 0 {
		over := (c.maxEntries > 0 && len(c.sorted)+entries > c.maxEntries) ||
			(c.maxBytes > 0 && c.bytes+int64(n) > c.maxBytes)
		if !over {
			return
		}
		e := c.lru.Back().Value.(*entry[R])
		c.remove(e)
		c.stats.Evictions++
		c.destroy(e)
	}
}

// destroy deregisters and unpins. Errors from deregistration are dropped:
// there is nobody to report them to, and the memory stays valid.
func (c *Cache[R]) destroy(e *entry[R]) {
	_ = e.region.Close()
	e.pin.Unpin()
	e.mem = nil
}

func (c *Cache[R]) release(e *entry[R]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	if e.dead {
		c.destroy(e)
		return
	}
	e.elem = c.lru.PushFront(e)
	c.evict(0, 0)
}

// Invalidate drops every registration overlapping b, at once for unused
// ones and on release for those in use. Call it before unmapping memory
// that may have been registered through the cache.
func (c *Cache[R]) Invalidate(b []byte) {
	start, end := span(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	var drop []*entry[R]
	for _, e := range c.sorted {
		if e.start < end && start < e.end {
			drop = append(drop, e)
		}
	}
	for _, e := range drop {
		c.remove(e)
		if e.refs == 0 {
			c.destroy(e)
		}
	}
}

// Stats returns the cache's counters.
func (c *Cache[R]) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = len(c.sorted)
	s.Bytes = c.bytes
	return s
}

// Close deregisters every unused registration and makes later Acquire
// calls fail; registrations in use are deregistered on release.
func (c *Cache[R]) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range append([]*entry[R](nil), c.sorted...) {
		c.remove(e)
		if e.refs == 0 {
			c.destroy(e)
		}
	}
	return nil
}
