// Package vec holds the vector kernels of the hot loops that Go does not
// vectorize: the sum of two float slices (the dense reductions, error
// feedback's update) and the scan for magnitudes at or above a threshold
// (the threshold selections). Each has a scalar loop for the tails, for
// other architectures and for the purego tag, and gives that loop's
// results bit for bit (vec_test.go compares both on the same inputs).
package vec

// Float is the element type of the sums.
type Float interface{ ~float32 | ~float64 }

// Add sets dst[i] += src[i] for every i < len(dst); len(src) >= len(dst).
// Elements are added one by one in IEEE arithmetic, as the scalar loop
// does, so the result does not depend on the kernel.
func Add[T Float](dst, src []T) {
	src = src[:len(dst)]
	i := addVec(dst, src)
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

// AppendAtLeast32 appends base+i to dst for every i with keys[i]&0x7fffffff
// >= t (t >= 1), in increasing order: the indices of the float32 entries
// whose magnitude bits are at least t.
func AppendAtLeast32(dst []uint32, keys []uint32, t, base uint32) []uint32 {
	const mask = 1<<31 - 1
	i := 0
	if t <= 1<<31 { // the kernel compares signed: t-1 must fit in 31 bits
		dst, i = atLeast32Vec(dst, keys, t, base)
	}
	for ; i < len(keys); i++ {
		if keys[i]&mask >= t {
			dst = append(dst, base+uint32(i))
		}
	}
	return dst
}
