//go:build !amd64 || purego

package collectives

// Without the vector kernels every element takes the scalar loop.

var useSumAVX2 = false

func sumVec[T Float](dst, src []T) int { return 0 }
