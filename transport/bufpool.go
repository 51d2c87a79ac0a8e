package transport

import (
	"fmt"
	"math/bits"
	"sync"
)

// Buffers for unexpected messages come from power-of-two size classes so a
// steady stream of same-sized messages does not allocate.
var pools [40]sync.Pool

func sizeClass(n int) int {
	if n <= 64 {
		return 6
	}
	return bits.Len(uint(n - 1))
}

// GetBuf returns a buffer of length n from the pool.
func GetBuf(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	c := sizeClass(n)
	if c >= len(pools) {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

// PutBuf returns a buffer obtained from GetBuf. Buffers of other capacities
// are dropped.
func PutBuf(b []byte) {
	c := cap(b)
	if c < 64 || c&(c-1) != 0 {
		return
	}
	k := bits.Len(uint(c - 1))
	if k >= len(pools) {
		return
	}
	pools[k].Put(&b)
}

func errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}
