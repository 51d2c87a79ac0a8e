// Package quant holds the low-precision value codecs and the lossless index
// codecs that the collectives use to cut the bytes they put on the wire.
//
// Value codecs (see Kind) turn a []float32 (or []float64, via float32) into
// bytes and back:
//
//   - None: raw little-endian float32, lossless.
//   - FP16, BF16: IEEE binary16 and bfloat16, round-to-nearest-even,
//     deterministic.
//   - Q8, Q4, Q2: QSGD-style stochastic quantization in buckets; every value
//     becomes a sign and a level in 0..s (s = 2^(b-1)-1) chosen by stochastic
//     rounding, so the decoded value is an unbiased estimate of the input.
//
// All codecs follow one calling convention built for buffers that are
// allocated once and reused (possibly registered for RDMA): EncodedSize gives
// the exact byte count, Encode writes into the caller's buffer and never
// grows it, Decode and DecodeAdd write into the caller's []float32. Nothing
// allocates in steady state. Encoded streams carry no element count: both
// sides of a collective know the segment length, and the decoder checks that
// the byte count matches it exactly.
//
// Index codecs (EncodeIndices, DecodeIndices) compress strictly increasing
// uint32 indices of sparse vectors with gap coding plus either LEB128
// varints or per-block bit packing. They are lossless and self-describing.
//
// Every decoder treats its input as untrusted network bytes: it validates
// lengths, ranges and padding, returns an error wrapping ErrCorrupt on bad
// input, never panics and never allocates from a length it read.
package quant
