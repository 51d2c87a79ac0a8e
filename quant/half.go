package quant

import (
	"encoding/binary"
	"math"
)

// Bit patterns of float32 values used by the binary16 conversion.
const (
	f32Inf         = 0x7f800000 // +Inf; anything larger (as |bits|) is NaN
	f32HalfMinNorm = 0x38800000 // 2^-14, the smallest normal binary16
	f32Half        = 0x3f000000 // 0.5, whose float32 ulp is 2^-24
	halfRebias     = (127 - 15) << 23
)

// Float32ToFP16 converts f to IEEE 754 binary16, rounding to nearest with
// ties to even. Magnitudes of 65520 and above become Inf (65504 is the
// largest finite binary16, and 65520 is the tie between it and 2^16);
// magnitudes below 2^-14 become binary16 subnormals (steps of 2^-24) or
// zero, keeping the sign. Inf stays Inf. NaN stays NaN: it becomes a quiet
// NaN keeping the sign and the top 9 bits of the payload.
func Float32ToFP16(f float32) uint16 {
	bits := math.Float32bits(f)
	abs := bits & 0x7fffffff
	// Kept under the inlining budget so the codec loops inline it: the
	// common normal case is straight-line code, the overflow clamp a
	// conditional move, and the rare cases (subnormal, NaN) a branch each.
	//
	// Normal range [2^-14, 65520): rebias the exponent and drop 13
	// mantissa bits. Adding 0xfff plus the lowest kept bit carries into
	// the kept bits exactly when the dropped part is above half, or is
	// half and the kept part is odd: round to nearest even. A carry out of
	// the mantissa correctly bumps the exponent. From 65520 up (Inf
	// included) the result reaches 0x7c00, and the min makes it Inf, as
	// binary16 defines overflow.
	result := min((abs-(halfRebias-0xfff)+abs>>13&1)>>13, 0x7c00)
	// Below 2^-14: binary16 subnormals are multiples of 2^-24, which is
	// the float32 ulp at 0.5. Adding 0.5 makes the float32 adder round |f|
	// to that step (to nearest even); the low mantissa bits of the sum are
	// then the binary16 bits, and a sum that rounds up to 2^-14 gives
	// 0x400, the smallest normal.
	if abs < f32HalfMinNorm {
		result = math.Float32bits(math.Float32frombits(abs)+0.5) - f32Half
	}
	if abs > f32Inf {
		result = 0x7e00 | abs>>13&0x3ff // quiet NaN, top payload bits
	}
	return uint16(bits>>16&0x8000 | result)
}

// FP16ToFloat32 converts an IEEE 754 binary16 value to float32. Every
// binary16 value is exactly representable, so this is exact, including
// subnormals, infinities and signed zeros. A NaN keeps its sign and payload
// and becomes quiet (a signalling NaN gets the quiet bit), as the F16C
// instruction VCVTPH2PS does, so the scalar and vector decoders agree bit
// for bit.
func FP16ToFloat32(h uint16) float32 {
	magnitude := uint32(h&0x7fff) << 13 // exponent and mantissa, float32-aligned
	result := magnitude + halfRebias    // normal: rebias the exponent
	// Zero or subnormal: mantissa * 2^-24, exact in float32.
	subnormal := math.Float32bits(float32(magnitude>>13) * 0x1p-24)
	if magnitude < 1<<23 {
		result = subnormal
	}
	if magnitude >= 0x1f<<23 {
		result = magnitude | f32Inf // Inf
		if magnitude > 0x1f<<23 {
			result |= 1 << 22 // NaN: payload kept, made quiet
		}
	}
	return math.Float32frombits(uint32(h&0x8000)<<16 | result)
}

// Float32ToBF16 converts f to bfloat16 (the upper 16 bits of a float32),
// rounding to nearest with ties to even. bfloat16 has float32's exponent
// range, so only values within half an ulp of the float32 maximum round to
// Inf; subnormals round like any other value. Inf stays Inf. NaN stays NaN:
// it becomes a quiet NaN keeping the sign and the top 6 bits of the
// payload (rounding could otherwise carry a NaN into Inf).
func Float32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > f32Inf {
		return uint16(bits>>16) | 0x40
	}
	// Same trick as binary16: add just under half of the dropped part's
	// range plus the lowest kept bit, then truncate.
	return uint16((bits + 0x7fff + (bits>>16)&1) >> 16)
}

// BF16ToFloat32 converts a bfloat16 value to float32; this is exact.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// encodeFP16 writes binary16 values, little-endian: float32 input through
// the vector kernel where there is one, the rest (the tail, float64 input)
// with the scalar conversion.
func encodeFP16[T float](out []byte, src []T) {
	done := 0
	if s, ok := any(src).([]float32); ok {
		done = encodeFP16Vec(out, s)
	}
	encodeFP16Go(out[2*done:], src[done:])
}

func decodeFP16[T float](dst []T, src []byte, add bool) {
	done := 0
	if d, ok := any(dst).([]float32); ok {
		done = decodeFP16Vec(d, src, add)
	}
	decodeFP16Go(dst[done:], src[2*done:], add)
}

// encodeBF16 writes bfloat16 values, little-endian, like encodeFP16.
func encodeBF16[T float](out []byte, src []T) {
	done := 0
	if s, ok := any(src).([]float32); ok {
		done = encodeBF16Vec(out, s)
	}
	encodeBF16Go(out[2*done:], src[done:])
}

func decodeBF16[T float](dst []T, src []byte, add bool) {
	done := 0
	if d, ok := any(dst).([]float32); ok {
		done = decodeBF16Vec(d, src, add)
	}
	decodeBF16Go(dst[done:], src[2*done:], add)
}

// The scalar loops: the reference the vector kernels are tested against.

func encodeFP16Go[T float](out []byte, src []T) {
	out = out[:2*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint16(out[2*i:], Float32ToFP16(float32(v)))
	}
}

func decodeFP16Go[T float](dst []T, src []byte, add bool) {
	src = src[:2*len(dst)]
	if add {
		for i := range dst {
			dst[i] += T(FP16ToFloat32(binary.LittleEndian.Uint16(src[2*i:])))
		}
		return
	}
	for i := range dst {
		dst[i] = T(FP16ToFloat32(binary.LittleEndian.Uint16(src[2*i:])))
	}
}

func encodeBF16Go[T float](out []byte, src []T) {
	out = out[:2*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint16(out[2*i:], Float32ToBF16(float32(v)))
	}
}

func decodeBF16Go[T float](dst []T, src []byte, add bool) {
	src = src[:2*len(dst)]
	if add {
		for i := range dst {
			dst[i] += T(BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:])))
		}
		return
	}
	for i := range dst {
		dst[i] = T(BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:])))
	}
}
