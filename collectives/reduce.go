package collectives

import "github.com/sparcml/sparcml/internal/vec"

// Reduction kernels. The sum runs on internal/vec's AVX2 kernel where the
// CPU has it; the others are plain loops over two slices, unrolled by four
// with the bounds checks hoisted so the compiler emits straight-line
// arithmetic. None allocates. Min and Max use Go's built-in min and
// max, which are commutative even for NaN (NaN wins) and signed zeros, so
// every rank computes bit-identical results whatever the order in which an
// algorithm combines the partial values.

// ReduceInto sets dst[i] = red(dst[i], src[i]) for i < min(len(dst),
// len(src)). Avg combines partial results as Sum does (the division by the
// number of contributions comes once, at the end: see Average). It reports
// false, leaving dst untouched, for an unknown red.
func ReduceInto[T Float](red ReduceOp, dst, src []T) bool {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	switch red {
	case Sum, Avg:
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
func validReduce(red ReduceOp) bool { return red <= Avg }

// Average divides every element of data by n, the number of
// contributions summed into it: the last step of an Avg reduction. The
// quotient is correctly rounded (a multiplication by 1/n when n is a power
// of two, where that is exact, else a division), so every rank that holds
// the same sum gets the same bits.
func Average[T Float](data []T, n int) {
	if n <= 1 {
		return
	}
	if n&(n-1) == 0 {
		scaleBy(data, 1/T(n))
		return
	}
	divideBy(data, T(n))
}

// finishReduce completes a reduction whose partial results were combined
// by ReduceInto: for Avg it divides the p-rank sum in data by p.
func finishReduce[T Float](red ReduceOp, data []T, p int) {
	if red == Avg {
		Average(data, p)
	}
}

func scaleBy[T Float](data []T, f T) {
	i := 0
	for ; i+4 <= len(data); i += 4 {
		d := data[i : i+4 : i+4]
		d[0] *= f
		d[1] *= f
		d[2] *= f
		d[3] *= f
	}
	for ; i < len(data); i++ {
		data[i] *= f
	}
}

func divideBy[T Float](data []T, q T) {
	i := 0
	for ; i+4 <= len(data); i += 4 {
		d := data[i : i+4 : i+4]
		d[0] /= q
		d[1] /= q
		d[2] /= q
		d[3] /= q
	}
	for ; i < len(data); i++ {
		data[i] /= q
	}
}

// sumInto runs on vector kernels where the CPU has them: the sum of a
// received segment is most of a dense allreduce's CPU over shared memory
// after the copies (sparcml bench --op allreduce --cpuprofile at P = 4).
func sumInto[T Float](dst, src []T) { vec.Add(dst, src) }

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
