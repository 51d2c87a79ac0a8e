package compress

import "unsafe"

// Error feedback's update v += g fused with the threshold selections'
// pass over v (Sampled, Reuse), as fused.go fuses it with the exact
// selection's. Their threshold is known before the update: Reuse's is
// kept from an earlier step, and Sampled draws its sample from v + g at
// the sampled positions (the same float sums the update then stores).
// The pass that adds g a block at a time gathers each block's entries at
// or above the threshold while the block is in the cache: one pass over
// memory instead of two (update, then gather). A threshold that misses
// the tolerance is corrected on the updated v as the method does. The
// result is the method's on the updated v, bit for bit
// (TestStepThresholdOfUpdate); BenchmarkCompressorScopes measures it.

// accumulateSampled is accumulate(v, g) (with g = 0 when takeGrad) then
// sampled on keys, v's bits, with seed.
func accumulateSampled[T Float, K key](s *scratch, dst []uint32, v, g []T, keys []K, k int, p *Config, seed uint64, r *Result, takeGrad bool) []uint32 {
	n := len(keys)
	m, worth := sampleSize(n, k, p)
	if !worth {
		accumulateAll(v, g, takeGrad)
		return exact(s, dst, keys, k, r)
	}
	sample := drawSample(s, n, m, seed, func(i int) K { return keyOf[T, K](v[i] + g[i]) })
	first := func(t K) ([]uint32, bool, float64) {
		base := len(dst)
		out, ok, scanned := accumulateGather(dst, v, g, keys, t, gatherLimit(k, p.Tolerance), takeGrad)
		return settleThreshold(s, out, base, keys, k, t, p.Tolerance, r, ok, scanned)
	}
	return sampledTries(s, dst, keys, k, p, sample, r, first)
}

// accumulateReuse is accumulate(v, g) (with g = 0 when takeGrad) then
// reuse on keys, v's bits: the kept threshold is tried in the pass that
// updates v.
func accumulateReuse[T Float, K key](s *scratch, dst []uint32, v, g []T, keys []K, k int, p *Config, st *State, r *Result, takeGrad bool) []uint32 {
	if !reusable(st, p, k, len(keys)) {
		accumulateAll(v, g, takeGrad)
		return reuseExact(s, dst, keys, k, st, r)
	}
	base := len(dst)
	t := keyAtLeast[K](st.threshold)
	out, ok, scanned := accumulateGather(dst, v, g, keys, t, gatherLimit(k, p.Tolerance), takeGrad)
	out, ok, _ = settleThreshold(s, out, base, keys, k, t, p.Tolerance, r, ok, scanned)
	return reuseSettle(s, dst, out, ok, keys, k, st, r)
}

// accumulateGather is accumulate(v, g) (with g = 0 when takeGrad) and
// gatherAtLeast(dst, keys, t, limit) on the updated v in the same pass,
// block by block; the update goes on to the end when the gathering
// stops.
func accumulateGather[T Float, K key](dst []uint32, v, g []T, keys []K, t K, limit int, takeGrad bool) (_ []uint32, ok bool, scanned int) {
	base := len(dst)
	ok, scanned = true, len(v)
	for lo := 0; lo < len(v); lo += gatherChunk {
		hi := accumulateBlock(v, g, lo, takeGrad)
		if !ok {
			continue
		}
		from := len(dst)
		dst, ok, _ = gatherAtLeast(dst, keys[lo:hi], t, limit-(from-base))
		for j := from; j < len(dst); j++ {
			dst[j] += uint32(lo)
		}
		if !ok {
			dst, scanned = dst[:base], hi
		}
	}
	return dst, ok, scanned
}

// accumulateAll is accumulate(v, g), with g = 0 when takeGrad.
func accumulateAll[T Float](v, g []T, takeGrad bool) {
	for lo := 0; lo < len(v); lo += gatherChunk {
		accumulateBlock(v, g, lo, takeGrad)
	}
}

// keyOf is the bit pattern of x as a key of K, K of x's width.
func keyOf[T Float, K key](x T) K { return *(*K)(unsafe.Pointer(&x)) }
