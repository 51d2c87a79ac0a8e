//go:build amd64 && !purego

package vec

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The kernels need AVX2 (HasAVX2 also means the OS saves YMM state) and,
// for the scan, BMI1's TZCNT and BLSR. They are variables so tests can run
// the scalar loops on this CPU.
var (
	useAdd     = cpu.X86.HasAVX2
	useAtLeast = cpu.X86.HasAVX2 && cpu.X86.HasBMI1
)

// HasAtLeast32 reports whether AppendAtLeast32 runs on the kernel: callers
// with a faster scalar scan of their own keep it otherwise.
var HasAtLeast32 = useAtLeast

//go:noescape
func addFloat32AVX2(dst, src *float32, n int)

//go:noescape
func addFloat64AVX2(dst, src *float64, n int)

//go:noescape
func atLeast32AVX2(dst, keys *uint32, n int, t, base uint32) int

// addVec adds a prefix of src into dst with the kernels and returns its
// length; Add does the rest.
func addVec[T Float](dst, src []T) int {
	if !useAdd {
		return 0
	}
	var zero T
	switch unsafe.Sizeof(zero) {
	case 4:
		n := len(dst) &^ 31
		if n > 0 {
			addFloat32AVX2((*float32)(unsafe.Pointer(&dst[0])), (*float32)(unsafe.Pointer(&src[0])), n)
		}
		return n
	case 8:
		n := len(dst) &^ 15
		if n > 0 {
			addFloat64AVX2((*float64)(unsafe.Pointer(&dst[0])), (*float64)(unsafe.Pointer(&src[0])), n)
		}
		return n
	}
	return 0
}

// atLeast32Vec scans the longest prefix of keys that is a multiple of 32
// (1 <= t <= 1<<31) and returns dst and the prefix's length.
func atLeast32Vec(dst, keys []uint32, t, base uint32) ([]uint32, int) {
	n := len(keys) &^ 31
	if !useAtLeast || n == 0 {
		return dst, 0
	}
	dst = slices.Grow(dst, n)
	found := atLeast32AVX2(unsafe.SliceData(dst[len(dst):cap(dst)]), &keys[0], n, t, base)
	return dst[:len(dst)+found], n
}
