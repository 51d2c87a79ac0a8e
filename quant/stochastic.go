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
	var maxBits uint32
	// float64 input is rounded to float32 first, like every value.
	for _, v := range x {
		maxBits = max(maxBits, math.Float32bits(float32(v))&0x7fffffff)
	}
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
// floor(a + u) with u uniform in [0, 1): that is floor(a) + 1 with
// probability a - floor(a) and floor(a) otherwise, so E[level] = a and the
// decoded value level*scale/s is unbiased. u takes 2^32 equally likely
// values, so the rounding probability is off by at most 2^-32 of a level.
// The product |x| * (s/scale) is off from the exact a by about 2^-45 at
// most; the clamp to s is a guard that keeps every code in range whatever
// the rounding.
func quantize[T float](c *codec, codes []byte, x []T, scale float32) {
	invStep := float64(c.levels) / float64(scale)
	levels := c.levels
	bits := c.bits & 63 // the masks tell the compiler shifts stay below 64
	signShift := (bits - 1) & 63
	perWord := 64 / int(bits) // 32, 16 or 8: always even
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

// quantizeValue returns the b-bit code (sign<<(b-1) | level) of v, given
// 32 random bits, invStep = s/scale and levels = s.
func quantizeValue(v float32, random uint32, invStep float64, levels uint64, signShift uint) uint64 {
	// u is uniform on the midpoints (k + 1/2) 2^-32: never 0, so a value
	// whose a came out a hair below its level (rounding in s/scale) still
	// reaches it; in particular the bucket's maximum always gets level s.
	u := float64(random)*0x1p-32 + 0x1p-33
	a := math.Abs(float64(v)) * invStep
	level := min(uint64(int64(a+u)), levels)
	sign := uint64(math.Float32bits(v)>>31) << signShift
	return level | sign
}

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
	// The reconstruction of every level, rounded once to float32 from the
	// exact product, so decoding is as accurate as float32 allows even for
	// tiny scales (scale/s in float32 could underflow).
	var table [128]float32
	step := float64(math.Float32frombits(scaleBits)) / float64(c.levels)
	for l := uint64(0); l <= c.levels; l++ {
		table[l] = float32(float64(l) * step)
	}
	unpack(c, dst, src[4:], &table, add)
}

// unpack decodes the codes of one bucket through the level table.
func unpack[T float](c *codec, dst []T, codes []byte, table *[128]float32, add bool) {
	bits := c.bits & 63 // the masks tell the compiler shifts stay below 64
	field := uint64(1)<<bits - 1
	magnitude := c.levels // mask of the level bits of a code
	perWord := 64 / int(bits)
	signShift := (bits - 1) & 63
	i := 0
	for w := 0; i+perWord <= len(dst); w += 8 {
		word := binary.LittleEndian.Uint64(codes[w:])
		out := dst[i : i+perWord]
		for j := range out {
			code := word & field
			word >>= bits
			v := math.Float32frombits(math.Float32bits(table[code&magnitude&127]) | uint32(code>>signShift)<<31)
			if add {
				out[j] += T(v)
			} else {
				out[j] = T(v)
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
		code := word & field
		word >>= bits
		v := math.Float32frombits(math.Float32bits(table[code&magnitude&127]) | uint32(code>>signShift)<<31)
		if add {
			dst[i] += T(v)
		} else {
			dst[i] = T(v)
		}
	}
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
