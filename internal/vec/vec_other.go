//go:build !amd64 || purego

package vec

// Without the kernels every element takes the scalar loops.

var useAdd, useAtLeast = false, false

// HasAtLeast32 reports whether AppendAtLeast32 runs on the kernel.
var HasAtLeast32 = false

func addVec[T Float](dst, src []T) int { return 0 }

func atLeast32Vec(dst, keys []uint32, t, base uint32) ([]uint32, int) { return dst, 0 }
