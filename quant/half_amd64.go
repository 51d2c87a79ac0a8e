//go:build amd64 && !purego

package quant

import "golang.org/x/sys/cpu"

// The fp16 and bf16 codecs spend all their time converting, so on amd64
// the float32 paths use vector kernels (half_amd64.s): F16C's VCVTPS2PH and
// VCVTPH2PS for fp16, which round to nearest even and keep NaNs exactly as
// Float32ToFP16 documents, and AVX2 integer arithmetic for bf16, the same
// bit operations as Float32ToBF16 on 8 lanes. They give bit-identical
// results to the scalar code (tests compare both on every binary16 pattern,
// random float32 patterns and under fuzzing); the scalar code still does
// the tails, float64 data and CPUs without the extensions.
//
// The flags are variables so tests can run the scalar path on this CPU.
var (
	useF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C // HasAVX2 also means the OS saves YMM state
	useAVX2 = cpu.X86.HasAVX2
)

//go:noescape
func fp16EncodeF16C(dst *byte, src *float32, n int)

//go:noescape
func fp16DecodeF16C(dst *float32, src *byte, n int)

//go:noescape
func fp16DecodeAddF16C(dst *float32, src *byte, n int)

//go:noescape
func bf16EncodeAVX2(dst *byte, src *float32, n int)

//go:noescape
func bf16DecodeAVX2(dst *float32, src *byte, n int)

//go:noescape
func bf16DecodeAddAVX2(dst *float32, src *byte, n int)

// encodeFP16Vec encodes a prefix of src into out (2 bytes per value, len(out)
// >= 2*len(src)) with the vector kernel and returns its length; the caller
// encodes the rest.
func encodeFP16Vec(out []byte, src []float32) int {
	n := len(src) &^ 7
	if !useF16C || n == 0 {
		return 0
	}
	_ = out[2*n-1] // the kernel writes out[:2n]
	fp16EncodeF16C(&out[0], &src[0], n)
	return n
}

// decodeFP16Vec decodes (or adds, if add) a prefix of src into dst and
// returns its length; len(src) >= 2*len(dst).
func decodeFP16Vec(dst []float32, src []byte, add bool) int {
	n := len(dst) &^ 7
	if !useF16C || n == 0 {
		return 0
	}
	_ = src[2*n-1]
	if add {
		fp16DecodeAddF16C(&dst[0], &src[0], n)
	} else {
		fp16DecodeF16C(&dst[0], &src[0], n)
	}
	return n
}

// encodeBF16Vec is encodeFP16Vec for bfloat16.
func encodeBF16Vec(out []byte, src []float32) int {
	n := len(src) &^ 15
	if !useAVX2 || n == 0 {
		return 0
	}
	_ = out[2*n-1]
	bf16EncodeAVX2(&out[0], &src[0], n)
	return n
}

// decodeBF16Vec is decodeFP16Vec for bfloat16.
func decodeBF16Vec(dst []float32, src []byte, add bool) int {
	n := len(dst) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_ = src[2*n-1]
	if add {
		bf16DecodeAddAVX2(&dst[0], &src[0], n)
	} else {
		bf16DecodeAVX2(&dst[0], &src[0], n)
	}
	return n
}
