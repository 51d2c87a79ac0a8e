package compress

import (
	"math/bits"
)

// rng is SplitMix64: a Weyl sequence through a 64-bit mixer. It is
// written out here, not taken from math/rand, so that a seed selects the
// same entries with every Go release.
type rng struct{ s uint64 }

func newRNG(seed uint64) rng { return rng{s: seed} }

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// below returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject method (no modulo bias).
func (r *rng) below(n uint64) uint64 {
	hi, lo := bits.Mul64(r.next(), n)
	if lo < n {
		floor := -n % n
		for lo < floor {
			hi, lo = bits.Mul64(r.next(), n)
		}
	}
	return hi
}

// mix combines a seed with a stream number (a step, a layer) into a new
// seed, so that nearby streams draw unrelated numbers.
func mix(seed, stream uint64) uint64 {
	r := rng{s: seed ^ bits.RotateLeft64(stream, 32)}
	r.next()
	return r.next() ^ stream
}

// randomK appends to dst, increasing, k distinct indices below n drawn
// uniformly (every k-subset equally likely) from seed, skipping entries
// whose magnitude is zero. Floyd's algorithm draws k numbers and marks
// them in a bitmap of n bits; reading the bitmap gives the indices in
// order, and the marked words are cleared on the way so the bitmap is
// clean for the next call without a pass over it.
func randomK[K key](s *scratch, dst []uint32, keys []K, k int, seed uint64) []uint32 {
	n := len(keys)
	if k >= n {
		return appendAbove(dst, keys, 0)
	}
	if k <= 0 {
		return dst
	}
	words := (n + 63) / 64
	if len(s.bits) < words {
		s.bits = make([]uint64, words)
	}
	set := s.bits[:words]
	r := newRNG(seed)
	for j := n - k; j < n; j++ {
		t := r.below(uint64(j) + 1)
		if set[t/64]&(1<<(t%64)) != 0 {
			t = uint64(j)
		}
		set[t/64] |= 1 << (t % 64)
	}
	mask := absMask[K]()
	for w, word := range set {
		if word == 0 {
			continue
		}
		set[w] = 0
		for word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if keys[i]&mask != 0 {
				dst = append(dst, uint32(i))
			}
		}
	}
	return dst
}
