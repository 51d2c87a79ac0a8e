//go:build !amd64 || purego

package quant

// Without the vector kernels every value takes the scalar path.

var useQuantize4AVX2 = false

func quantizePairs4Vec(_ []byte, _ []float32, _ float64, state uint64) (int, uint64) {
	return 0, state
}

func maxAbsBitsVec([]float32) (int, uint32) { return 0, 0 }

var useQuantize4AVX512 = false
