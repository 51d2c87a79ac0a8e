//go:build !amd64 || purego

package quant

// unpackGapsVec and unpack4Vec are unpack_amd64.go's vector paths, which
// other CPUs and purego builds do not have: they decode nothing.
func unpackGapsVec(out []uint32, prev uint64, src []byte, off int, width uint) (int, uint64, uint64) {
	return 0, prev, 0
}

func unpack4Vec[T float](dst []T, codes []byte, table *[256]float32, add bool) int {
	return 0
}
