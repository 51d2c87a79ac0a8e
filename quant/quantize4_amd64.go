//go:build amd64 && !purego

package quant

import "golang.org/x/sys/cpu"

// The 4-bit stochastic quantizer is the main CPU cost of a q4 collective
// (a SplitMix64 draw per pair of values plus a float multiply, add and
// truncation per value), so on amd64 the float32 path runs it in vector
// kernels (quantize4_amd64.s): 4 pairs at a time with AVX2, 8 with
// AVX-512F+DQ where the CPU has it (native 64-bit multiplies and float64
// to integer conversions make that one faster again; BenchmarkEncodeQ4Paths
// compares the paths, figures in docs/DEFAULTS.md, "q4 quantizer and
// unpacking paths"). An AVX2 kernel
// also finds each bucket's maximum |x|. The kernels make exactly the
// scalar draws (SplitMix64 is counter-based: draw k from state s is
// mix(s + k*gamma), so the lanes compute consecutive draws independently)
// and the scalar roundings (float64 multiply, then add 0.5, then
// truncate), so their codes are bit-identical to quantizePairs4's; tests
// compare every path on random and edge-case inputs, with seeds chosen to
// put values exactly on level boundaries, and under fuzzing. The scalar
// code still does the tails (fewer than 16 pairs), float64 data and CPUs
// without AVX2.
//
// The flags are variables so tests can run every path on this CPU
// (useQuantize4AVX512 only counts when useQuantize4AVX2 is set).
var (
	useQuantize4AVX2   = cpu.X86.HasAVX2                           // HasAVX2 also means the OS saves YMM state
	useQuantize4AVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ // HasAVX512F checks the OS saves ZMM state
)

//go:noescape
func quantize4AVX2(codes *byte, x *float32, n int, invStep float64, state uint64)

//go:noescape
func quantize4AVX512(codes *byte, x *float32, n int, invStep float64, state uint64)

//go:noescape
func maxAbsBitsAVX2(x *float32, n int) uint32

// quantizePairs4Vec quantizes a prefix of the pairs of x into codes (one
// byte per pair, len(x) = 2 len(codes)) with the vector kernel and returns
// the number of pairs done and the generator's new state; the caller does
// the rest.
func quantizePairs4Vec(codes []byte, x []float32, invStep float64, state uint64) (int, uint64) {
	n := len(codes) &^ 15
	if !useQuantize4AVX2 || n == 0 {
		return 0, state
	}
	_ = x[2*n-1]
	if useQuantize4AVX512 {
		quantize4AVX512(&codes[0], &x[0], n, invStep, state)
	} else {
		quantize4AVX2(&codes[0], &x[0], n, invStep, state)
	}
	return n, state + uint64(n)*splitmixGamma
}

// maxAbsBitsVec returns the number of leading values of x it scanned and
// the maximum of their |bits| (see bucketScale); the caller scans the rest.
func maxAbsBitsVec(x []float32) (int, uint32) {
	n := len(x) &^ 31
	if !useQuantize4AVX2 || n == 0 {
		return 0, 0
	}
	return n, maxAbsBitsAVX2(&x[0], n)
}
