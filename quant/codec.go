package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Codec encodes float32 (or float64) values into bytes and decodes them
// back.
//
// The calling convention is built for buffers that are allocated once and
// reused: size them with EncodedSize, and no call allocates.
//
// The stateless codecs (None, FP16, BF16) are safe for concurrent use. A
// stochastic codec (Q8, Q4, Q2) owns a random number generator, so Encode
// must not be called concurrently on one Codec; give each goroutine its own
// (the decoders read no state and may run concurrently).
type Codec interface {
	// Kind returns the codec's kind.
	Kind() Kind
	// BucketSize returns the number of values that share one scale in a
	// stochastic codec's stream (Options.BucketSize, or DefaultBucketSize
	// for 0), and 0 for the kinds without buckets (None, FP16, BF16).
	// Streams of equal kind but different bucket sizes differ in layout,
	// so both ends of a transfer must agree on it.
	BucketSize() int
	// EncodedSize returns the exact number of bytes Encode writes for n
	// values (0 for n <= 0).
	EncodedSize(n int) int
	// Encode writes the encoding of src into dst[:EncodedSize(len(src))]
	// and returns that slice. It never grows dst: if cap(dst) is too small
	// it returns ErrShortBuffer, so the bytes always land in the caller's
	// (possibly registered) memory.
	Encode(dst []byte, src []float32) ([]byte, error)
	// Decode decodes src into dst. The stream carries no element count:
	// len(dst) is the count, and src must be exactly EncodedSize(len(dst))
	// bytes. Bad input returns an error wrapping ErrCorrupt and leaves dst
	// unchanged (every check runs before the first write). (The size check
	// catches a wrong count except
	// within one byte of sub-byte codes, where Q4 and Q2 sizes coincide:
	// both sides must agree on the count, as they do in a collective.)
	Decode(dst []float32, src []byte) error
	// DecodeAdd is Decode fused with a sum: dst[i] += decoded[i]. It gives
	// bit-for-bit the same result as Decode into a scratch slice followed by
	// an element-wise add, without the scratch slice or the second pass. On
	// error dst is unchanged, so a bad message is never half-applied.
	DecodeAdd(dst []float32, src []byte) error

	// Encode64 is Encode for float64 input. Every codec works in float32:
	// each value is first rounded to float32 (to nearest even) and then
	// encoded exactly as Encode would, into the same stream, so a float64
	// sender and a float32 receiver interoperate. For None this makes the
	// codec lossy: send raw float64 bytes when exactness matters.
	Encode64(dst []byte, src []float64) ([]byte, error)
	// Decode64 is Decode into float64; decoded values widen exactly.
	Decode64(dst []float64, src []byte) error
	// DecodeAdd64 is DecodeAdd into float64: dst[i] += float64(decoded[i]),
	// the sum rounded in float64.
	DecodeAdd64(dst []float64, src []byte) error
}

// DefaultBucketSize is the number of values that share one scale in the
// stochastic codecs when Options.BucketSize is 0 (SparCML's choice).
const DefaultBucketSize = 1024

// MaxBucketSize bounds Options.BucketSize.
const MaxBucketSize = 1 << 24

// ScaleMode chooses the per-bucket scale of the stochastic codecs.
type ScaleMode uint8

const (
	// ScaleMaxAbs scales each bucket by its largest absolute value (the
	// default). The levels then span exactly the values present, which gives
	// a per-value variance of at most scale^2/(4 s^2): tighter than the L2
	// norm for the bucket sizes used in practice, since max|x| <= ||x||_2.
	ScaleMaxAbs ScaleMode = iota
	// ScaleL2 scales each bucket by its Euclidean norm, as in the QSGD
	// paper, whose variance bound E||Q(x)-x||^2 <= min(n/s^2, sqrt(n)/s)
	// ||x||^2 holds for it.
	ScaleL2
)

// String returns "maxabs" or "l2".
func (m ScaleMode) String() string {
	switch m {
	case ScaleMaxAbs:
		return "maxabs"
	case ScaleL2:
		return "l2"
	}
	return fmt.Sprintf("scalemode(%d)", uint8(m))
}

// NonFinitePolicy says what a stochastic codec does with a bucket that
// holds a NaN or an infinity, which it cannot scale.
type NonFinitePolicy uint8

const (
	// NonFinitePoison (the default) encodes such a bucket with a NaN scale,
	// so every value of the bucket decodes to NaN. The non-finite value
	// thus still reaches every rank after a reduction, as it would with a
	// float32 allreduce, and a loss scaler that checks gradients for
	// overflow after the allreduce still sees it; no rank fails alone.
	NonFinitePoison NonFinitePolicy = iota
	// NonFiniteReject makes Encode return a *NonFiniteError naming the
	// first offending index.
	NonFiniteReject
)

// Options configures the stochastic codecs. The zero value is the
// recommended configuration: buckets of 1024, max-abs scale, poisoning of
// non-finite buckets, seed 0. The other codecs ignore Options.
type Options struct {
	// BucketSize is the number of values sharing one float32 scale; 0 means
	// DefaultBucketSize. Must be in [1, MaxBucketSize].
	BucketSize int
	// Scale chooses max-abs (default) or L2-norm scaling.
	Scale ScaleMode
	// NonFinite chooses what happens to buckets holding NaN or Inf.
	NonFinite NonFinitePolicy
	// Seed seeds the codec's random generator. Give every rank (and every
	// encoder goroutine) a different seed: equal seeds on equal data make
	// the rounding noise of the ranks identical, so it adds up instead of
	// averaging out in a sum.
	Seed uint64
}

// ErrShortBuffer is returned by Encode when cap(dst) is smaller than
// EncodedSize(len(src)).
var ErrShortBuffer = errors.New("quant: destination buffer too small")

// ErrCorrupt is wrapped by every error a decoder returns for malformed
// input.
var ErrCorrupt = errors.New("quant: corrupt input")

// NonFiniteError reports a NaN or infinity that a stochastic codec with
// NonFiniteReject refused to encode.
type NonFiniteError struct {
	Index int     // index of the first non-finite value in src
	Value float32 // the value (NaN, +Inf or -Inf)
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("quant: cannot quantize non-finite value %v at index %d", e.Value, e.Index)
}

// New returns a codec of the given kind. opts is checked and used only by
// the stochastic kinds.
func New(kind Kind, opts Options) (Codec, error) {
	if !kind.Valid() {
		return nil, fmt.Errorf("quant: invalid codec kind %d", uint8(kind))
	}
	c := &codec{kind: kind}
	if kind.Stochastic() {
		if err := c.initStochastic(opts); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// codec implements every Kind. The public methods check buffer sizes once
// and dispatch to generic per-kind kernels, instantiated for float32 and
// float64.
type codec struct {
	kind Kind
	// Stochastic kinds only.
	bits       uint   // b: bits per value
	levels     uint64 // s = 2^(b-1) - 1
	bucketSize int
	opts       Options
	rng        Rand
}

// float is the element type of the kernels.
type float interface{ float32 | float64 }

func (c *codec) Kind() Kind { return c.kind }

func (c *codec) BucketSize() int { return c.bucketSize }

func (c *codec) EncodedSize(n int) int {
	if n <= 0 {
		return 0
	}
	switch c.kind {
	case None:
		return 4 * n
	case FP16, BF16:
		return 2 * n
	}
	return c.stochasticSize(n)
}

func (c *codec) Encode(dst []byte, src []float32) ([]byte, error) {
	return encodeInto(c, dst, src)
}

func (c *codec) Encode64(dst []byte, src []float64) ([]byte, error) {
	return encodeInto(c, dst, src)
}

func (c *codec) Decode(dst []float32, src []byte) error {
	return decodeFrom(c, dst, src, false)
}

func (c *codec) DecodeAdd(dst []float32, src []byte) error {
	return decodeFrom(c, dst, src, true)
}

func (c *codec) Decode64(dst []float64, src []byte) error {
	return decodeFrom(c, dst, src, false)
}

func (c *codec) DecodeAdd64(dst []float64, src []byte) error {
	return decodeFrom(c, dst, src, true)
}

func encodeInto[T float](c *codec, dst []byte, src []T) ([]byte, error) {
	out, err := output(dst, c.EncodedSize(len(src)))
	if err != nil {
		return nil, err
	}
	switch c.kind {
	case None:
		encodeNone(out, src)
	case FP16:
		encodeFP16(out, src)
	case BF16:
		encodeBF16(out, src)
	default:
		if err := encodeStochastic(c, out, src); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeFrom[T float](c *codec, dst []T, src []byte, add bool) error {
	if want := c.EncodedSize(len(dst)); len(src) != want {
		return corruptf("%s stream of %d bytes for %d values, want %d bytes", c.kind, len(src), len(dst), want)
	}
	switch c.kind {
	case None:
		decodeNone(dst, src, add)
	case FP16:
		decodeFP16(dst, src, add)
	case BF16:
		decodeBF16(dst, src, add)
	default:
		return decodeStochastic(c, dst, src, add)
	}
	return nil
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// output returns dst resliced to size, or ErrShortBuffer.
func output(dst []byte, size int) ([]byte, error) {
	if cap(dst) < size {
		return nil, fmt.Errorf("%w: need %d bytes, have %d", ErrShortBuffer, size, cap(dst))
	}
	return dst[:size], nil
}

// encodeNone writes raw little-endian float32.
func encodeNone[T float](out []byte, src []T) {
	out = out[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)))
	}
}

func decodeNone[T float](dst []T, src []byte, add bool) {
	src = src[:4*len(dst)]
	if add {
		for i := range dst {
			dst[i] += T(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
		}
		return
	}
	for i := range dst {
		dst[i] = T(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
	}
}
