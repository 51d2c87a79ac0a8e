//go:build !amd64 || purego

package quant

// Without vector kernels every value takes the scalar path.

var useF16C, useAVX2 = false, false

func encodeFP16Vec([]byte, []float32) int       { return 0 }
func decodeFP16Vec([]float32, []byte, bool) int { return 0 }
func encodeBF16Vec([]byte, []float32) int       { return 0 }
func decodeBF16Vec([]float32, []byte, bool) int { return 0 }
