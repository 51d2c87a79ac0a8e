package compress

// Error feedback's update v += g fused with the exact selection's passes
// over v: the update runs a block of gatherChunk entries at a time and the
// selection reads each block while it is still in the cache.
//
// After a first step, the pass gathers every entry at or above a guess,
// guessFactor times the last step's threshold, as long as it has gathered
// at most guessLimit·k, with their keys. When it gathers more than k, the
// k-th largest magnitude is at or above the guess, so the gathered entries
// hold every entry that can be selected, and topK on their keys (a compact
// array, in the cache) is the exact top k of the whole input: one pass
// over memory instead of three (update, histogram, partition). Otherwise
// topK runs on the updated input. On a first step (no threshold yet) the
// pass builds topK's histogram instead. Either way the result is Select's
// on the updated v, bit for bit; only the order of the work changes.
// Thresholds drift slowly from step to step in training (Ok-Topk reuses
// them for that reason). BenchmarkStep and BenchmarkCompressorScopes
// measure the fused step, and its one-pass share.

const (
	// guessFactor is the guess's fraction of the last threshold. Error
	// feedback crowds the residual just below the threshold: with i.i.d.
	// normal gradients at 1%, about 2k entries are at or above 0.95
	// times the last threshold and 3k above 0.9 times it, once the
	// threshold has settled (a few steps from a zero residual).
	guessFactor = 0.95
	// guessLimit bounds the gathered entries, in multiples of k.
	guessLimit = 4
)

// accumulateSelect sets v += g (and g = 0 when takeGrad) and appends to dst
// the indices Select would append for the updated v.
func (s *Selector[T]) accumulateSelect(dst []uint32, v, g []T, k int, st *State, takeGrad bool) ([]uint32, Result) {
	if (s.cfg.Method == Sampled || s.cfg.Method == Reuse) && k > 0 {
		return s.accumulateThreshold(dst, v, g, k, st, takeGrad)
	}
	if s.cfg.Method != Exact || k <= 0 || k >= len(v) {
		accumulateAll(v, g, takeGrad)
		return s.Select(dst, v, k, st)
	}
	st.Step++ // as Select does
	var r Result
	base := len(dst)
	if k32, k64 := keysOf(v); k32 != nil {
		var t uint32
		dst, t = accumulateTopK(&s.sc, dst, v, g, k32, k, st.threshold, takeGrad)
		r.Threshold = magnitudeOf(t)
	} else {
		var t uint64
		dst, t = accumulateTopK(&s.sc, dst, v, g, k64, k, st.threshold, takeGrad)
		r.Threshold = magnitudeOf(t)
	}
	r.Count, r.Exact = len(dst)-base, true
	st.threshold = r.Threshold
	return dst, r
}

// accumulateThreshold is accumulateSelect for Sampled and Reuse (k > 0).
func (s *Selector[T]) accumulateThreshold(dst []uint32, v, g []T, k int, st *State, takeGrad bool) ([]uint32, Result) {
	seed := mix(st.Seed, st.Step) // as Select draws it
	st.Step++
	var r Result
	k32, k64 := keysOf(v)
	switch {
	case s.cfg.Method == Reuse && k32 != nil:
		dst = accumulateReuse(&s.sc, dst, v, g, k32, k, &s.cfg, st, &r, takeGrad)
	case s.cfg.Method == Reuse:
		dst = accumulateReuse(&s.sc, dst, v, g, k64, k, &s.cfg, st, &r, takeGrad)
	case k32 != nil:
		dst = accumulateSampled(&s.sc, dst, v, g, k32, k, &s.cfg, seed, &r, takeGrad)
	default:
		dst = accumulateSampled(&s.sc, dst, v, g, k64, k, &s.cfg, seed, &r, takeGrad)
	}
	return dst, r
}

// accumulateTopK is accumulate(v, g) (with g = 0 when takeGrad) then topK
// on keys, v's bits (0 < k < len(keys)): in one pass when last, the
// previous threshold, makes a good guess, else with the histogram of the
// first pass fused.
func accumulateTopK[T Float, K key](s *scratch, dst []uint32, v, g []T, keys []K, k int, last float64, takeGrad bool) ([]uint32, K) {
	g = g[:len(v)]
	if !(last > 0) {
		hist := s.histogram()
		for lo := 0; lo < len(v); lo += gatherChunk {
			hi := accumulateBlock(v, g, lo, takeGrad)
			topDigits(hist, keys[lo:hi])
		}
		return topKOfHistogram(s, dst, keys, k, hist)
	}
	base := len(dst)
	guess := keyAtLeast[K](guessFactor * last)
	limit, gathering := guessLimit*k, true
	found := gatheredKeys[K](s)[:0]
	for lo := 0; lo < len(v); lo += gatherChunk {
		hi := accumulateBlock(v, g, lo, takeGrad)
		if gathering {
			from := len(dst)
			dst, gathering, _ = gatherAtLeast(dst, keys[lo:hi], guess, limit-(from-base))
			for j := from; j < len(dst); j++ {
				dst[j] += uint32(lo)
				found = append(found, keys[dst[j]])
			}
		}
	}
	keepGatheredKeys(s, found)
	// More than k entries at or above the guess: the k-th largest is
	// too, so the gathered entries hold every entry the top k can take.
	// Their keys were copied while in the cache, so the top k among them
	// is selected on a compact array.
	if gathering && len(found) > k {
		s.onePass++
		pos, t := topK(s, s.positions[:0], found, k)
		s.positions = pos
		for j, p := range pos { // increasing, p >= j: in place
			dst[base+j] = dst[base+int(p)]
		}
		return dst[:base+len(pos)], t
	}
	return topK(s, dst[:base], keys, k)
}

// accumulateBlock runs accumulate on the block of gatherChunk entries of
// v and g from lo, then zeroes it in g when takeGrad (its lines still in the
// cache: StepTaking), and returns the block's end.
func accumulateBlock[T Float](v, g []T, lo int, takeGrad bool) int {
	hi := min(lo+gatherChunk, len(v))
	accumulate(v[lo:hi], g[lo:hi])
	if takeGrad {
		clear(g[lo:hi])
	}
	return hi
}

// gatheredKeys is s's buffer for gathered keys of type K.
func gatheredKeys[K key](s *scratch) []K {
	if magBits[K]() == 31 {
		return any(s.found32).([]K)
	}
	return any(s.found64).([]K)
}

// keepGatheredKeys keeps found, grown, for the next step.
func keepGatheredKeys[K key](s *scratch, found []K) {
	switch f := any(found).(type) {
	case []uint32:
		s.found32 = f
	case []uint64:
		s.found64 = f
	}
}
