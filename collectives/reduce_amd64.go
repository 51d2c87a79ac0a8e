//go:build amd64 && !purego

package collectives

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The dense sum runs on AVX2 where the CPU has it. Go does not vectorize
// the scalar loop, and the sum of a received segment is most of a dense
// allreduce's CPU over shared memory after the copies (sparcml bench
// --op allreduce --cpuprofile at P = 4). The kernels add element by
// element in the same order as the scalar loop, so the result is the same
// bits (TestSumVecMatchesScalar); `go test -bench ReduceInto` compares both.
//
// useSumAVX2 is a variable so tests can run the scalar path on this CPU.
var useSumAVX2 = cpu.X86.HasAVX2 // HasAVX2 also means the OS saves YMM state

//go:noescape
func sumFloat32AVX2(dst, src *float32, n int)

//go:noescape
func sumFloat64AVX2(dst, src *float64, n int)

// sumVec adds a prefix of src into dst with the vector kernels and returns
// its length; the caller does the rest. len(src) >= len(dst).
func sumVec[T Float](dst, src []T) int {
	if !useSumAVX2 {
		return 0
	}
	switch elemSize[T]() { // ~float32 or ~float64
	case 4:
		n := len(dst) &^ 31
		if n > 0 {
			sumFloat32AVX2((*float32)(unsafe.Pointer(&dst[0])), (*float32)(unsafe.Pointer(&src[0])), n)
		}
		return n
	case 8:
		n := len(dst) &^ 15
		if n > 0 {
			sumFloat64AVX2((*float64)(unsafe.Pointer(&dst[0])), (*float64)(unsafe.Pointer(&src[0])), n)
		}
		return n
	}
	return 0
}
