package collectives

// Reduction kernels. They are plain loops over two slices, unrolled by four
// with the bounds checks hoisted so the compiler emits straight-line
// arithmetic; they never allocate. Min and Max use Go's built-in min and
// max, which are commutative even for NaN (NaN wins) and signed zeros, so
// every rank computes bit-identical results whatever the order in which an
// algorithm combines the partial values.

// ReduceInto sets dst[i] = red(dst[i], src[i]) for i < min(len(dst),
// len(src)). It reports false, leaving dst untouched, for an unknown red.
func ReduceInto[T Float](red ReduceOp, dst, src []T) bool {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	switch red {
	case Sum:
		sumInto(dst, src)
	case Min:
		minInto(dst, src)
	case Max:
		maxInto(dst, src)
	default:
		return false
	}
	return true
}

// validReduce reports whether red is one of the supported reductions.
func validReduce(red ReduceOp) bool { return red <= Max }

func sumInto[T Float](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func minInto[T Float](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] = min(d[0], s[0])
		d[1] = min(d[1], s[1])
		d[2] = min(d[2], s[2])
		d[3] = min(d[3], s[3])
	}
	for ; i < len(dst); i++ {
		dst[i] = min(dst[i], src[i])
	}
}

func maxInto[T Float](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] = max(d[0], s[0])
		d[1] = max(d[1], s[1])
		d[2] = max(d[2], s[2])
		d[3] = max(d[3], s[3])
	}
	for ; i < len(dst); i++ {
		dst[i] = max(dst[i], src[i])
	}
}
