package keyheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPopsInOrder: popping the root and sifting down yields the keys
// sorted, as slices.Sort orders them.
func TestPopsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		keys := make([]uint64, rng.IntN(100))
		for i := range keys {
			keys[i] = rng.Uint64N(50) // repeats on purpose
		}
		want := slices.Clone(keys)
		slices.Sort(want)
		Init(keys)
		var got []uint64
		for len(keys) > 0 {
			got = append(got, keys[0])
			keys[0] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			Down(keys, 0)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("popped %v, want %v", got, want)
		}
	}
}
