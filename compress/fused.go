package compress

// Error feedback's update v += g fused with the selection's first pass
// over v: the update runs a block of gatherChunk entries at a time and the
// selection reads each block while it is still in the cache, so the step
// reads the residual from memory once instead of twice. The selection is
// the one Select makes on the updated v, bit for bit; only the order of
// the work changes. Exact fuses its histogram of top digits; the other
// methods update first and select after (BenchmarkStep,
// BenchmarkCompressorScopes).

// accumulateSelect sets v += g and appends to dst the indices Select
// would append for the updated v.
func (s *Selector[T]) accumulateSelect(dst []uint32, v, g []T, k int, st *State) ([]uint32, Result) {
	if s.cfg.Method != Exact || k <= 0 || k >= len(v) {
		accumulate(v, g)
		return s.Select(dst, v, k, st)
	}
	st.Step++ // as Select does
	var r Result
	hist := s.sc.histogram()
	var t float64
	base := len(dst)
	if k32, k64 := keysOf(v); k32 != nil {
		accumulateTopDigits(v, g, k32, hist)
		var tk uint32
		dst, tk = topKOfHistogram(&s.sc, dst, k32, k, hist)
		t = magnitudeOf(tk)
	} else {
		accumulateTopDigits(v, g, k64, hist)
		var tk uint64
		dst, tk = topKOfHistogram(&s.sc, dst, k64, k, hist)
		t = magnitudeOf(tk)
	}
	r.Count, r.Threshold, r.Exact = len(dst)-base, t, true
	return dst, r
}

// accumulateTopDigits is accumulate(v, g) and topDigits(hist, keys),
// keys being v's bits, block by block.
func accumulateTopDigits[T Float, K key](v, g []T, keys []K, hist *[bins]uint32) {
	g = g[:len(v)]
	for lo := 0; lo < len(v); lo += gatherChunk {
		hi := min(lo+gatherChunk, len(v))
		accumulate(v[lo:hi], g[lo:hi])
		topDigits(hist, keys[lo:hi])
	}
}
