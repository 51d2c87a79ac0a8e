package collectives

import "github.com/sparcml/sparcml/quant"

// How QuantizedAllreduce cuts the vector: P balanced blocks, each cut
// into segments that travel as one message each and are encoded on their
// own, and how many bytes that puts on the wire.

// QuantizedAllreduceBytesSent returns exactly how many payload bytes rank
// sends in QuantizedAllreduce of n elements of elemSize bytes (4 or 8) over
// p ranks with codec: the encodings of every other rank's block, plus P-1
// copies of the encoding of its own.
func QuantizedAllreduceBytesSent(n, elemSize, p, rank int, codec quant.Codec) int64 {
	if elemSize <= 0 {
		return 0
	}
	return quantizedBytesSent(n, quantSegmentElems(codec, elemSize), p, rank, codec)
}

// quantSegmentElems is the default segment length in elements. For the
// fixed-width codecs (none, fp16, bf16) a message carries segmentBytes on
// the wire, as a float32 allreduce's messages do: each message costs a few
// system calls and a wake-up at both ends whatever its size, so cutting by
// input bytes would pay them twice as often for fp16's half-size messages.
// The stochastic codecs, whose size per value is not fixed, cut
// segmentBytes of input.
func quantSegmentElems(c quant.Codec, elemSize int) int {
	if w := fixedWidth(c); w > 0 {
		return segmentBytes / w
	}
	return segmentBytes / elemSize
}

// fixedWidth is the number of bytes per value of the codecs whose stream is
// a plain array (none, fp16, bf16): any slice of values encodes to the
// matching slice of bytes. 0 for the stochastic codecs (and nil).
func fixedWidth(c quant.Codec) int {
	if c == nil || !c.Kind().Valid() || c.Kind().Stochastic() {
		return 0
	}
	return c.EncodedSize(1)
}

// quantizedBytesSent is QuantizedAllreduceBytesSent for segments of seg
// elements.
func quantizedBytesSent(n, seg, p, rank int, codec quant.Codec) int64 {
	if p <= 1 || n <= 0 || rank < 0 || rank >= p || codec == nil || !codec.Kind().Valid() {
		return 0
	}
	blocks := balanced(n, p)
	var bytes int64
	for j := range p {
		lo, hi := blocks.block(j)
		size := int64(encodedBlockSize(codec, hi-lo, seg))
		if j == rank {
			size *= int64(p - 1)
		}
		bytes += size
	}
	return bytes
}

// quantSegments returns how a block of n elements is cut into messages:
// count segments of size elements, the last one shorter. Like the dense
// transfers, an empty block still takes one (empty) message, and blocks of
// more than stepsPerRound segments get longer segments.
func quantSegments(n, seg int) (count, size int) {
	return segmentsFor(n, seg, stepsPerRound), max(seg, ceilDiv(n, stepsPerRound))
}

// encodedBlockSize is the number of bytes of a block of n elements encoded
// segment by segment.
func encodedBlockSize(c quant.Codec, n, seg int) int {
	_, size := quantSegments(n, seg)
	return n/size*c.EncodedSize(size) + c.EncodedSize(n%size)
}

// maxSegments is the number of segments of the longest block. Balanced
// blocks differ by one element, which can make one more segment.
func (q *quantRun[T]) maxSegments() int {
	count, _ := quantSegments(q.blocks.largest(), q.seg)
	return count
}

func (q *quantRun[T]) block(j int) []T {
	lo, hi := q.blocks.block(j)
	return q.data[lo:hi:hi]
}

func (q *quantRun[T]) blockLen(j int) int {
	lo, hi := q.blocks.block(j)
	return hi - lo
}

// segmentSize is the largest segment of any block.
func (q *quantRun[T]) segmentSize() int {
	_, size := quantSegments(q.blocks.largest(), q.seg)
	return min(size, q.blocks.largest())
}

// segment returns segment k of s, cut by quantSegments.
func (q *quantRun[T]) segment(s []T, k int) []T {
	_, size := quantSegments(len(s), q.seg)
	lo := min(k*size, len(s))
	hi := min(lo+size, len(s))
	return s[lo:hi:hi]
}
