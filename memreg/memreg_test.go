package memreg

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type fakeRegion struct {
	r      *fakeReg
	b      []byte
	closed bool
}

func (f *fakeRegion) Close() error {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	if f.closed {
		return errors.New("double close")
	}
	f.closed = true
	f.r.live--
	return nil
}

type fakeReg struct {
	mu    sync.Mutex
	calls int
	live  int
	fail  bool
}

func (r *fakeReg) Register(b []byte) (*fakeRegion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return nil, errors.New("ibv_reg_mr: Cannot allocate memory")
	}
	r.calls++
	r.live++
	return &fakeRegion{r: r, b: b}, nil
}

func TestAllocFree(t *testing.T) {
	b, err := Alloc(10000, false)
	require.NoError(t, err)
	require.Len(t, b.Bytes(), 10000)
	for i := range b.Bytes() {
		require.Zero(t, b.Bytes()[i])
	}
	b.Bytes()[9999] = 7
	require.NoError(t, b.Free())
	require.NoError(t, b.Free(), "second Free is a no-op")
	require.Nil(t, b.Bytes())
	_, err = Alloc(0, false)
	require.Error(t, err)
}

func TestAllocLocked(t *testing.T) {
	b, err := Alloc(4096, true)
	if err != nil {
		require.Contains(t, err.Error(), "ulimit -l")
		t.Skipf("mlock not permitted here: %v", err)
	}
	require.NoError(t, b.Free())
}

func TestCacheHitMissAndSubrange(t *testing.T) {
	r := &fakeReg{}
	c := NewCache[*fakeRegion](r, 8, 0)
	buf := make([]byte, 1<<16)
	h, err := c.Acquire(buf)
	require.NoError(t, err)
	h.Release()
	// Same buffer and a sub-range hit; a range reaching past misses.
	h2, err := c.Acquire(buf)
	require.NoError(t, err)
	require.Same(t, h.Region(), h2.Region())
	h3, err := c.Acquire(buf[100:200])
	require.NoError(t, err)
	require.Same(t, h.Region(), h3.Region())
	h2.Release()
	h3.Release()
	other := make([]byte, 100)
	h4, err := c.Acquire(other)
	require.NoError(t, err)
	require.NotSame(t, h.Region(), h4.Region())
	h4.Release()
	s := c.Stats()
	require.Equal(t, 2, s.Misses)
	require.Equal(t, 2, s.Hits)
	require.Equal(t, 2, s.Entries)
	require.Equal(t, int64(1<<16+100), s.Bytes)
	require.NoError(t, c.Close())
	require.Zero(t, r.live)
	_, err = c.Acquire(buf)
	require.ErrorIs(t, err, ErrCacheClosed)
}

func TestCacheLRUEviction(t *testing.T) {
	r := &fakeReg{}
	c := NewCache[*fakeRegion](r, 3, 0)
	bufs := make([][]byte, 5)
	regs := make([]*fakeRegion, 5)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	for i := 0; i < 3; i++ {
		h, err := c.Acquire(bufs[i])
		require.NoError(t, err)
		regs[i] = h.Region()
		h.Release()
	}
	// Touch 0 so 1 is the least recently used.
	h, _ := c.Acquire(bufs[0])
	h.Release()
	h, err := c.Acquire(bufs[3])
	require.NoError(t, err)
	h.Release()
	require.True(t, regs[1].closed, "LRU entry evicted and deregistered")
	require.False(t, regs[0].closed)
	require.False(t, regs[2].closed)
	require.Equal(t, 3, c.Stats().Entries)
	require.Equal(t, 1, c.Stats().Evictions)
	require.NoError(t, c.Close())
	require.Zero(t, r.live)
}

func TestCacheInUseNotEvicted(t *testing.T) {
	r := &fakeReg{}
	c := NewCache[*fakeRegion](r, 0, 100)
	a, b := make([]byte, 80), make([]byte, 80)
	ha, err := c.Acquire(a)
	require.NoError(t, err)
	hb, err := c.Acquire(b) // over the byte bound, but a is in use
	require.NoError(t, err)
	require.False(t, ha.Region().closed)
	require.Equal(t, 2, r.live)
	ha.Release() // now a is evicted to get back under the bound
	require.True(t, ha.Region().closed)
	require.Equal(t, 1, r.live)
	hb.Release()
	require.NoError(t, c.Close())
	require.Zero(t, r.live)
}

func TestCacheInvalidate(t *testing.T) {
	r := &fakeReg{}
	c := NewCache[*fakeRegion](r, 0, 0)
	buf := make([]byte, 4096)
	h1, _ := c.Acquire(buf[:1000])
	h1.Release()
	h2, _ := c.Acquire(buf[2000:3000])
	c.Invalidate(buf[500:2500])
	require.True(t, h1.Region().closed, "unused overlapping entry dropped at once")
	require.False(t, h2.Region().closed, "entry in use survives until release")
	h2.Release()
	require.True(t, h2.Region().closed)
	require.Zero(t, c.Stats().Entries)
	// A new acquire of the range registers again.
	h3, err := c.Acquire(buf[2000:3000])
	require.NoError(t, err)
	require.NotSame(t, h2.Region(), h3.Region())
	h3.Release()
	require.NoError(t, c.Close())
	require.Zero(t, r.live)
}

func TestCacheRegisterError(t *testing.T) {
	r := &fakeReg{fail: true}
	c := NewCache[*fakeRegion](r, 0, 0)
	_, err := c.Acquire(make([]byte, 10))
	require.ErrorContains(t, err, "ibv_reg_mr")
	require.Zero(t, c.Stats().Entries)
	_, err = c.Acquire(nil)
	require.Error(t, err)
}

func TestCacheConcurrent(t *testing.T) {
	r := &fakeReg{}
	c := NewCache[*fakeRegion](r, 16, 0)
	bufs := make([][]byte, 40)
	for i := range bufs {
		bufs[i] = make([]byte, 128+i)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				b := bufs[(i*7+g)%len(bufs)]
				h, err := c.Acquire(b[1:])
				if err != nil {
					t.Error(err)
					return
				}
				if h.Region().closed {
					t.Error("got a closed region")
				}
				h.Release()
			}
		}(g)
	}
	wg.Wait()
	require.LessOrEqual(t, c.Stats().Entries, 16)
	require.NoError(t, c.Close())
	require.Zero(t, r.live)
}

func TestCheckMemlock(t *testing.T) {
	require.NoError(t, checkMemlock(1<<20, Unlimited, Unlimited, false))
	require.NoError(t, checkMemlock(1<<20, 8<<20, 8<<20, false))
	require.NoError(t, checkMemlock(64<<20, 8<<20, 8<<20, true), "CAP_IPC_LOCK is not bound by the limit")
	err := checkMemlock(64<<20, 8<<20, 8<<20, false)
	require.ErrorIs(t, err, ErrMemlock)
	for _, want := range []string{"need 64 MiB", "soft limit 8 MiB", "ulimit -l", "limits.conf", "LimitMEMLOCK", "--ulimit memlock"} {
		require.True(t, strings.Contains(err.Error(), want), "%q lacks %q", err, want)
	}
	soft, hard, err := MemlockLimit()
	require.NoError(t, err)
	require.LessOrEqual(t, soft, hard)
	require.NoError(t, CheckMemlock(1))
}
