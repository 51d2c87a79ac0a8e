package compress

import (
	"math"
	"unsafe"
)

// Float is the element type of gradients: float32 or float64.
type Float interface{ ~float32 | ~float64 }

// key is the bit pattern of a value. Clearing the sign bit leaves the
// magnitude's pattern, and IEEE 754 orders non-negative patterns as the
// numbers they encode (subnormals, normals, +Inf, then every NaN), so
// selection compares integers: no float compare, no special case for
// NaN, and ties are equal integers.
type key interface{ ~uint32 | ~uint64 }

// keysOf views x as the unsigned integers holding its bit patterns
// (exactly one of the results is non-nil for a non-empty x).
func keysOf[T Float](x []T) ([]uint32, []uint64) {
	if len(x) == 0 {
		return nil, nil
	}
	var z T
	p := unsafe.Pointer(&x[0])
	if unsafe.Sizeof(z) == 4 {
		return unsafe.Slice((*uint32)(p), len(x)), nil
	}
	return nil, unsafe.Slice((*uint64)(p), len(x))
}

// isFloat32 reports whether T is float32.
func isFloat32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// absMask clears the sign bit of a key of K.
func absMask[K key]() K { return ^K(0) >> 1 }

// magBits is the number of bits of a magnitude key (31 or 63).
func magBits[K key]() uint {
	var z K
	return uint(unsafe.Sizeof(z))*8 - 1
}

// magnitudeOf returns the float64 value of the magnitude key m of K.
func magnitudeOf[K key](m K) float64 {
	if magBits[K]() == 31 {
		return float64(math.Float32frombits(uint32(m)))
	}
	return math.Float64frombits(uint64(m))
}

// keyAtLeast returns the smallest magnitude key of K whose value is at
// least t (t >= 0): the key a threshold compares against. A threshold of
// zero gives key 1, the smallest nonzero magnitude, since zeros are never
// selected.
func keyAtLeast[K key](t float64) K {
	var m K
	if magBits[K]() == 31 {
		f := float32(t)
		if float64(f) < t { // rounded down: the next float32 is the first >= t
			f = math.Nextafter32(f, float32(math.Inf(1)))
		}
		m = K(math.Float32bits(f))
	} else {
		m = K(math.Float64bits(t))
	}
	if m == 0 {
		m = 1
	}
	return m
}

// keys32 is keys as []uint32, for keys of 32 bits (magBits 31).
func keys32[K key](keys []K) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(keys))), len(keys))
}
