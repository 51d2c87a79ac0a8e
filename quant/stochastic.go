package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Stream layout of the stochastic kinds (Q8, Q4, Q2 with b = 8, 4, 2 bits).
// The values are cut into buckets of Options.BucketSize (the last may be
// shorter); each bucket of m values is
//
//	scale   float32, little-endian (4 bytes)
//	codes   ceil(m*b/8) bytes
//
// Code i of the bucket occupies bits [i*b, i*b+b) of the codes read as a
// little-endian bit string (value 0 in the low bits of byte 0). A code is
// sign<<(b-1) | level with level in 0..s, s = 2^(b-1)-1, and decodes to
// (-1)^sign * level * scale / s. Unused high bits of the last byte are zero.
// A zero scale means an all-zero bucket (codes all zero); a NaN scale means
// a bucket that held NaN or Inf (codes all zero; every value decodes to
// NaN). Any other scale is finite and positive.

// quietNaN is the float32 NaN written as the scale of a poisoned bucket.
const quietNaN = 0x7fc00000

// initStochastic validates opts and sets up a Q8, Q4 or Q2 codec.
func (c *codec) initStochastic(opts Options) error {
	if opts.BucketSize == 0 {
		opts.BucketSize = DefaultBucketSize
	}
	if opts.BucketSize < 1 || opts.BucketSize > MaxBucketSize {
		return fmt.Errorf("quant: bucket size %d out of range [1, %d]", opts.BucketSize, MaxBucketSize)
	}
	if opts.Scale != ScaleMaxAbs && opts.Scale != ScaleL2 {
		return fmt.Errorf("quant: invalid scale mode %d", uint8(opts.Scale))
	}
	if opts.NonFinite != NonFinitePoison && opts.NonFinite != NonFiniteReject {
		return fmt.Errorf("quant: invalid non-finite policy %d", uint8(opts.NonFinite))
	}
	c.bits = uint(c.kind.Bits())
	c.levels = 1<<(c.bits-1) - 1
	c.bucketSize = opts.BucketSize
	c.opts = opts
	c.rng = Rand{state: opts.Seed}
	return nil
}

// bucketBytes is the encoded size of a bucket of m values.
func (c *codec) bucketBytes(m int) int {
	return 4 + (m*int(c.bits)+7)/8
}

// stochasticSize is EncodedSize for n > 0 values.
func (c *codec) stochasticSize(n int) int {
	full, rest := n/c.bucketSize, n%c.bucketSize
	size := full * c.bucketBytes(c.bucketSize)
	if rest > 0 {
		size += c.bucketBytes(rest)
	}
	return size
}

// encodeStochastic writes the buckets of src into out, which has the exact
// size.
func encodeStochastic[T float](c *codec, out []byte, src []T) error {
	off := 0
	for start := 0; start < len(src); start += c.bucketSize {
		bucket := src[start:min(start+c.bucketSize, len(src))]
		size := c.bucketBytes(len(bucket))
		if err := encodeBucket(c, out[off:off+size], bucket, start); err != nil {
			return err
		}
		off += size
	}
	return nil
}

// encodeBucket writes one bucket; base is the index of x[0] in the input,
// for error messages.
func encodeBucket[T float](c *codec, dst []byte, x []T, base int) error {
	scale, finite := bucketScale(c, x)
	codes := dst[4:]
	if !finite {
		if c.opts.NonFinite == NonFiniteReject {
			return nonFiniteError(x, base)
		}
		binary.LittleEndian.PutUint32(dst, quietNaN)
		clear(codes)
		return nil
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(scale))
	if scale == 0 {
		clear(codes) // all-zero bucket: no rounding, no random numbers
		return nil
	}
	quantize(c, codes, x, scale)
	return nil
}

// bucketScale returns the scale of x and whether x is all finite.
func bucketScale[T float](c *codec, x []T) (float32, bool) {
	// For non-NaN floats, comparing |bits| as integers orders magnitudes,
	// and NaN and Inf are exactly the patterns >= Inf's: one integer pass
	// finds both the maximum and any non-finite value.
	// float64 input is rounded to float32 first, like every value. Four
	// running maxima, so that consecutive values do not wait for each
	// other's compare. float32 input takes the vector kernel (if any) for
	// all but the last few values.
	var m0, m1, m2, m3 uint32
	i := 0
	if x32, ok := any(x).([]float32); ok {
		i, m0 = maxAbsBitsVec(x32)
	}
	for ; i+4 <= len(x); i += 4 {
		q := x[i : i+4 : i+4]
		m0 = max(m0, math.Float32bits(float32(q[0]))&0x7fffffff)
		m1 = max(m1, math.Float32bits(float32(q[1]))&0x7fffffff)
		m2 = max(m2, math.Float32bits(float32(q[2]))&0x7fffffff)
		m3 = max(m3, math.Float32bits(float32(q[3]))&0x7fffffff)
	}
	for _, v := range x[i:] {
		m0 = max(m0, math.Float32bits(float32(v))&0x7fffffff)
	}
	maxBits := max(m0, m1, m2, m3)
	if maxBits >= f32Inf {
		return 0, false
	}
	maxAbs := math.Float32frombits(maxBits)
	if c.opts.Scale == ScaleMaxAbs || maxAbs == 0 {
		return maxAbs, true
	}
	// L2 norm in float64: squares of float32 values cannot overflow it.
	// Rounding to float32 is monotone, so the result is still >= maxAbs
	// and every |x|/scale stays <= 1; if the norm overflows float32, the
	// max-abs scale is used for this bucket (the decoder only needs a scale
	// bounding the values).
	var sum float64
	for _, v := range x {
		v32 := float64(float32(v))
		sum += v32 * v32
	}
	norm := float32(math.Sqrt(sum))
	if math.IsInf(float64(norm), 0) {
		return maxAbs, true
	}
	return norm, true
}

// quantize writes the codes of x for a finite, positive scale.
//
// Each value is mapped to a = |x| * s / scale in [0, s], and its level is
// floor(a + u) with u uniform on the 2^32 midpoints (k + 1/2) 2^-32: that
// is floor(a) + 1 with probability a - floor(a) (up to 2^-33) and floor(a)
// otherwise, so E[level] = a and the decoded value level*scale/s is
// unbiased. It is computed in fixed point with 32 fractional bits: with
// A = a 2^32 and r the 32 random bits, floor(a + u) = floor((A + 1/2 + r)
// / 2^32) = (round(A) + r) >> 32, round(A) taken half up, one float
// addition and one conversion (see quantizeValue). u is never 0, so a
// value whose a came out a hair below its level (rounding in s/scale,
// about 2^-45 at most) still reaches it: the bucket's maximum always gets
// level s, and the clamp to s is a guard that keeps every code in range
// whatever the rounding.
func quantize[T float](c *codec, codes []byte, x []T, scale float32) {
	invStep := float64(c.levels) / float64(scale) * 0x1p32
	if c.bits == 4 {
		quantize4(c, codes, x, invStep)
		return
	}
	quantizeWords(c, codes, x, invStep)
}

// quantizeWords is quantize for any width: perWord codes are gathered in
// a 64-bit word and stored at once, the last few byte by byte.
func quantizeWords[T float](c *codec, codes []byte, x []T, invStep float64) {
	levels := c.levels
	bits := c.bits & 63 // the masks tell the compiler shifts stay below 64
	signShift := (bits - 1) & 63
	perWord := 64 / int(bits) // 32 or 8 (q2, q8): always even
	state := c.rng.state      // kept in a register, stored back at the end
	i := 0
	for ; i+perWord <= len(x); i += perWord {
		group := x[i : i+perWord]
		var word uint64
		shift := uint(0)
		for j := 0; j+1 < len(group); j += 2 {
			var random uint64
			state, random = splitmix64(state)
			word |= quantizeValue(float32(group[j]), uint32(random), invStep, levels, signShift) << (shift & 63)
			shift += bits
			word |= quantizeValue(float32(group[j+1]), uint32(random>>32), invStep, levels, signShift) << (shift & 63)
			shift += bits
		}
		binary.LittleEndian.PutUint64(codes[i*int(bits)/8:], word)
	}
	// Tail: fewer than perWord values, stored byte by byte.
	var word uint64
	var random uint64
	for j, v := range x[i:] {
		if j&1 == 0 {
			state, random = splitmix64(state)
		} else {
			random >>= 32
		}
		word |= quantizeValue(float32(v), uint32(random), invStep, levels, signShift) << ((uint(j) * bits) & 63)
	}
	tail := codes[i*int(bits)/8:]
	for k := range tail {
		tail[k] = byte(word >> ((8 * uint(k)) & 63))
	}
	c.rng.state = state
}

// quantize4 is quantize for 4-bit codes: the two codes of one random
// draw make one byte, stored as it is (no shifts by a variable count).
// The codes and the random numbers they use are those of the generic
// loop, so the stream is the same. float32 input takes the vector kernel
// (if any) for all but the last few pairs, with the same draws.
func quantize4[T float](c *codec, codes []byte, x []T, invStep float64) {
	pairs := len(x) / 2
	done, state := 0, c.rng.state
	if x32, ok := any(x).([]float32); ok {
		done, state = quantizePairs4Vec(codes[:pairs], x32[:2*pairs], invStep, state)
	}
	state = quantizePairs4(codes[done:pairs], x[2*done:2*pairs], invStep, state)
	if len(x)&1 != 0 {
		var random uint64
		state, random = splitmix64(state)
		codes[pairs] = byte(quantizeValue(float32(x[len(x)-1]), uint32(random), invStep, 7, 3))
	}
	c.rng.state = state
}

// quantizePairs4 is quantize4's loop (len(x) = 2 len(codes)), a function
// of its own so that its variables stay in registers; it returns the
// generator's new state.
func quantizePairs4[T float](codes []byte, x []T, invStep float64, state uint64) uint64 {
	x = x[:2*len(codes)]
	for k := range codes {
		var random uint64
		state, random = splitmix64(state)
		pair := x[2*k : 2*k+2 : 2*k+2]
		lo := quantizeValue(float32(pair[0]), uint32(random), invStep, 7, 3)
		hi := quantizeValue(float32(pair[1]), uint32(random>>32), invStep, 7, 3)
		codes[k] = byte(lo | hi<<4)
	}
	return state
}

// quantizeValue returns the b-bit code (sign<<(b-1) | level) of v, given
// 32 random bits r, invStep = 2^32 s/scale and levels = s: the level is
// (round(|v| invStep) + r) >> 32 (see quantize), at most s.
func quantizeValue(v float32, random uint32, invStep float64, levels uint64, signShift uint) uint64 {
	b := math.Float32bits(v) // sign and magnitude from the bits: no float masks
	abs := float64(math.Float32frombits(b & 0x7fffffff))
	// The product is rounded before the addition (the explicit conversion
	// forbids a fused multiply-add, which the compiler would otherwise use
	// on arm64 and GOAMD64=v3): every build and the vector kernel round
	// the same way, so a seed gives the same stream everywhere.
	fixed := uint64(int64(float64(abs*invStep) + 0.5)) // |v| <= scale: below 2^35
	level := min((fixed+uint64(random))>>32, levels)
	return level | uint64(b>>31)<<signShift
}

// splitmixGamma is SplitMix64's increment (see splitmix64): after n draws
// the state has grown by n*splitmixGamma.
const splitmixGamma = 0x9e3779b97f4a7c15

// nonFiniteError finds the first NaN or Inf in x.
func nonFiniteError[T float](x []T, base int) error {
	for i, v := range x {
		if v32 := float32(v); math.Float32bits(v32)&0x7fffffff >= f32Inf {
			return &NonFiniteError{Index: base + i, Value: v32}
		}
	}
	return nil
}

// decodeStochastic decodes src, whose length has been checked, into dst.
// It validates every bucket before writing anything, so a corrupt stream
// leaves dst untouched (a reduction never half-applies a bad message).
func decodeStochastic[T float](c *codec, dst []T, src []byte, add bool) error {
	for start, off := 0, 0; start < len(dst); start += c.bucketSize {
		m := min(c.bucketSize, len(dst)-start)
		size := c.bucketBytes(m)
		if err := c.checkBucket(src[off:off+size], m); err != nil {
			return fmt.Errorf("%w (bucket at value %d)", err, start)
		}
		off += size
	}
	for start, off := 0, 0; start < len(dst); start += c.bucketSize {
		bucket := dst[start:min(start+c.bucketSize, len(dst))]
		size := c.bucketBytes(len(bucket))
		decodeBucket(c, bucket, src[off:off+size], add)
		off += size
	}
	return nil
}

// checkBucket validates one encoded bucket of m values: a scale that is
// zero, NaN (with all codes zero) or finite and positive, and zero padding.
func (c *codec) checkBucket(src []byte, m int) error {
	scaleBits := binary.LittleEndian.Uint32(src)
	codes := src[4:]
	if used := uint(m*int(c.bits)) % 8; used != 0 && codes[len(codes)-1]>>used != 0 {
		return corruptf("nonzero padding bits")
	}
	switch {
	case scaleBits&0x7fffffff > f32Inf: // NaN: a poisoned bucket
		if !allZero(codes) {
			return corruptf("NaN-scale bucket with nonzero codes")
		}
	case scaleBits == 0:
		if !allZero(codes) {
			return corruptf("zero-scale bucket with nonzero codes")
		}
	case scaleBits >= f32Inf: // +Inf, or the sign bit set
		return corruptf("bucket scale %v is not finite and positive", math.Float32frombits(scaleBits))
	}
	return nil
}

// decodeBucket decodes one validated bucket of len(dst) values from src.
func decodeBucket[T float](c *codec, dst []T, src []byte, add bool) {
	scaleBits := binary.LittleEndian.Uint32(src)
	switch {
	case scaleBits&0x7fffffff > f32Inf:
		fill(dst, math.Float32frombits(quietNaN), add)
		return
	case scaleBits == 0:
		fill(dst, 0, add)
		return
	}
	// The reconstruction of every code, rounded once to float32 from the
	// exact product, so decoding is as accurate as float32 allows even for
	// tiny scales (scale/s in float32 could underflow); the negative codes
	// are the same values with the sign bit set.
	var table [256]float32
	step := float64(math.Float32frombits(scaleBits)) / float64(c.levels)
	neg := uint64(1) << (c.bits - 1)
	for l := uint64(0); l <= c.levels; l++ {
		v := float32(float64(l) * step)
		table[l] = v
		table[(l|neg)&255] = math.Float32frombits(math.Float32bits(v) | 1<<31)
	}
	unpack(c, dst, src[4:], &table, add)
}

// unpack decodes the codes of one bucket through the table of every
// code's value: one shift, one mask and one load per value.
func unpack[T float](c *codec, dst []T, codes []byte, table *[256]float32, add bool) {
	bits := c.bits & 63 // the masks tell the compiler shifts stay below 64
	field := uint64(1)<<bits - 1
	perWord := 64 / int(bits)
	i := 0
	if bits == 4 {
		i = unpack4Vec(dst, codes, table, add)
		i += unpack4(dst[i:], codes[i/2:], table, add)
	}
	for w := i * int(bits) / 8; i+perWord <= len(dst); w += 8 {
		word := binary.LittleEndian.Uint64(codes[w:])
		out := dst[i : i+perWord]
		if add {
			for j := range out {
				out[j] += T(table[word&field&255])
				word >>= bits
			}
		} else {
			for j := range out {
				out[j] = T(table[word&field&255])
				word >>= bits
			}
		}
		i += perWord
	}
	// Tail: fewer than perWord values, read byte by byte.
	var word uint64
	tail := codes[i*int(bits)/8:]
	for k := range tail {
		word |= uint64(tail[k]) << ((8 * uint(k)) & 63)
	}
	for ; i < len(dst); i++ {
		v := T(table[word&field&255])
		word >>= bits
		if add {
			dst[i] += v
		} else {
			dst[i] = v
		}
	}
}

// unpack4 is unpack's loop for 4-bit codes: 16 values per 8-byte word,
// every shift a constant. It returns how many values it decoded (a
// multiple of 16); unpack does the rest.
func unpack4[T float](dst []T, codes []byte, table *[256]float32, add bool) int {
	n := len(dst) / 16
	if add {
		for k := range n {
			out := dst[16*k : 16*k+16 : 16*k+16]
			w := binary.LittleEndian.Uint64(codes[8*k:])
			out[0] += T(table[w&15])
			out[1] += T(table[w>>4&15])
			out[2] += T(table[w>>8&15])
			out[3] += T(table[w>>12&15])
			out[4] += T(table[w>>16&15])
			out[5] += T(table[w>>20&15])
			out[6] += T(table[w>>24&15])
			out[7] += T(table[w>>28&15])
			out[8] += T(table[w>>32&15])
			out[9] += T(table[w>>36&15])
			out[10] += T(table[w>>40&15])
			out[11] += T(table[w>>44&15])
			out[12] += T(table[w>>48&15])
			out[13] += T(table[w>>52&15])
			out[14] += T(table[w>>56&15])
			out[15] += T(table[w>>60])
		}
		return 16 * n
	}
	for k := range n {
		out := dst[16*k : 16*k+16 : 16*k+16]
		w := binary.LittleEndian.Uint64(codes[8*k:])
		out[0] = T(table[w&15])
		out[1] = T(table[w>>4&15])
		out[2] = T(table[w>>8&15])
		out[3] = T(table[w>>12&15])
		out[4] = T(table[w>>16&15])
		out[5] = T(table[w>>20&15])
		out[6] = T(table[w>>24&15])
		out[7] = T(table[w>>28&15])
		out[8] = T(table[w>>32&15])
		out[9] = T(table[w>>36&15])
		out[10] = T(table[w>>40&15])
		out[11] = T(table[w>>44&15])
		out[12] = T(table[w>>48&15])
		out[13] = T(table[w>>52&15])
		out[14] = T(table[w>>56&15])
		out[15] = T(table[w>>60])
	}
	return 16 * n
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// fill sets (or, with add, adds) v to every element of dst.
func fill[T float](dst []T, v float32, add bool) {
	if !add {
		for i := range dst {
			dst[i] = T(v)
		}
		return
	}
	for i := range dst {
		dst[i] += T(v)
	}
}
