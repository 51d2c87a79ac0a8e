// Package keyheap is the binary min-heap of uint64 keys that the k-way
// merges of sorted index lists share: a key is index<<32 | list, so one
// integer compare orders by index and breaks ties by list number, the
// order every rank must agree on (sparse.SumAll's merge, the balanced
// ranges of collectives).
package keyheap

// Init orders keys into a heap.
func Init(keys []uint64) {
	for i := len(keys)/2 - 1; i >= 0; i-- {
		Down(keys, i)
	}
}

// Down restores the heap below keys[i] after keys[i] grew.
func Down(keys []uint64, i int) {
	for {
		l := 2*i + 1
		if l >= len(keys) {
			return
		}
		m := l
		if r := l + 1; r < len(keys) && keys[r] < keys[l] {
			m = r
		}
		if keys[m] >= keys[i] {
			return
		}
		keys[i], keys[m] = keys[m], keys[i]
		i = m
	}
}
