package collectives

import (
	"fmt"

	"github.com/sparcml/sparcml/quant"
	"github.com/sparcml/sparcml/transport"
)

// QuantizedAllreduce sums data across ranks (red Sum), or averages it (red
// Avg: the decoded sum divided by the number of ranks), sending values in
// the codec's low-precision format. On return every rank holds the same,
// bit-identical result. Min and Max are refused (ErrInvalid): those of
// quantized values are not meaningful estimates of the exact ones.
//
// The vector is cut into P balanced blocks, block j owned by rank j:
//
//  1. Reduce-scatter by direct sends: each rank encodes every block j != r
//     once and sends it to its owner, which decodes and adds the P-1
//     encodings into its own exact block, in T's precision (float32 or
//     float64).
//  2. Allgather: each owner encodes its reduced block once and sends the
//     same bytes to every rank; everyone, the owner included, replaces the
//     block by the decoding of those bytes.
//
// Every contribution is thus quantized once and the sum once more: two
// quantizations per element whatever P is, instead of one per hop as a
// ring that re-encodes partial sums would do (see docs/QUANTIZATION.md).
// Each rank sends about 2(P-1)/P n values, as a ring allreduce does, at the
// codec's bits per value (QuantizedAllreduceBytesSent is exact). Blocks
// travel as segments encoded on their own (512 KiB on the wire for none,
// fp16 and bf16, 512 KiB of input for the stochastic codecs), and the two
// phases are pipelined segment by segment, so that the allgather of the
// first segments overlaps the reduce-scatter of the later ones.
//
// Every rank must pass a codec of the same kind and, for the stochastic
// kinds, the same bucket size; the descriptor carries both, so ranks
// using different codecs fail with a mismatch. Give each rank a different
// Options.Seed so the ranks' rounding noise averages out. The codec is used
// from the calling goroutine only (stochastic codecs are not safe for
// concurrent use), so it must not be shared with a concurrent operation.
//
// A float64 vector is rounded to float32 when encoded (the codecs work in
// float32) but accumulated in float64. With one rank, data is returned
// unchanged (nothing is sent, so nothing is quantized); an empty vector
// still meets every rank's descriptor. fp16 overflows to Inf where an
// input value or the final sum reaches 65520 in magnitude (partial sums
// stay in T); stochastic codecs turn
// a bucket holding NaN or Inf into NaN (or fail the operation on every
// rank with quant.NonFiniteReject).
func QuantizedAllreduce[T Float](op *Op, data []T, red ReduceOp, codec quant.Codec) error {
	return quantizedAllreduce(op, data, red, codec, quantSegmentElems(codec, elemSize[T]()))
}

// quantizedAllreduce is QuantizedAllreduce with blocks cut into messages of
// at most seg elements (tests use tiny segments).
func quantizedAllreduce[T Float](op *Op, data []T, red ReduceOp, codec quant.Codec, seg int) error {
	if err := checkOp(op); err != nil {
		return err
	}
	setDesc[T](op, transport.OpAllreduce, red, AlgoQuantizedSplit, 0, len(data))
	op.Desc.Param = codecParamOf(codec)
	switch {
	case red != Sum && red != Avg:
		return failInvalid(op, "low-precision allreduce supports sum and avg, not %v", red)
	case codec == nil:
		return failInvalid(op, "quantized allreduce: nil codec")
	case !codec.Kind().Valid():
		return failInvalid(op, "quantized allreduce: invalid codec kind %v", codec.Kind())
	case op.Size() == 1:
		return nil
	case len(data) == 0:
		return dissemination(op)
	}
	q := &quantRun[T]{op: op, data: data, codec: codec, blocks: balanced(len(data), op.Size()), seg: seg}
	if err := q.run(); err != nil {
		return err
	}
	finishReduce(red, data, op.Size())
	return nil
}

// quantRun is one QuantizedAllreduce on at least two ranks and a non-empty
// vector.
type quantRun[T Float] struct {
	op     *Op
	data   []T
	codec  quant.Codec
	blocks layout
	seg    int

	// Receive buffers from the pool: the peers' encodings of this rank's
	// block (reduce-scatter) and the owners' encodings of theirs
	// (allgather). Each holds one message per (peer, segment).
	rsBuf, agBuf   []byte
	rsRecv, agRecv [][]*transport.Request // [peer][segment]
	payloads       [][]byte               // reduceOwn's scratch, one per peer
}

// quantAllgatherStep is the first step of the allgather: segment k of the
// reduce-scatter message from one rank to another uses step k, segment k
// of the allgather one quantAllgatherStep+k (roundStep(1)), so every
// (sender, receiver, step) is unique.
const quantAllgatherStep = stepsPerRound

// quantLag is how many segment rounds the reduction of a segment trails
// its scatter, and the decoding of the gathered segment trails its
// reduction (see run).
const quantLag = 2

// run pipelines the two phases segment by segment. Every block is cut into
// segments the same way, so round k of the schedule handles segment k of
// every block:
//
//   - scatter: encode segment k of every other rank's block and send it to
//     its owner;
//   - reduce: add the peers' encodings of segment k-quantLag of this rank's
//     block, then encode the reduced segment once, replace it by its
//     decoding and send those bytes to every peer;
//   - gather: decode segment k-2*quantLag of every other rank's block.
//
// The peers' segment j was sent in their round j, so waiting for it in
// round j+quantLag leaves slack for ranks that lag slightly, and an
// owner's reduced segment j goes out in round j+quantLag while most of the
// vector is still being scattered: the allgather overlaps the
// reduce-scatter instead of following it. Every wait is for a message its
// sender sent in an earlier round (sends never wait for the receiver's
// progress: every receive is posted up front), so the schedule cannot
// deadlock, and the messages, step numbers and bytes are those of the
// unpipelined schedule.
func (q *quantRun[T]) run() error {
	p, r := q.op.Size(), q.op.Rank()
	q.postReceives()
	q.payloads = make([][]byte, 0, p-1)
	// Each round sends P-1 scatter messages; enough slots for two rounds
	// keep the encoder from waiting on a send the writer has not finished.
	window := newSendWindow(q.op, q.codec.EncodedSize(q.segmentSize()), min(max(2*(p-1), pipelineDepth), 4*pipelineDepth))
	mine := q.block(r)
	ownEnc := q.op.Pool.Get(encodedBlockSize(q.codec, len(mine), q.seg))
	ownOff := 0
	sends := make([]*transport.Request, 0, len(q.rsRecv[0])*(p-1))
	rounds := q.maxSegments()
	for k := range rounds + 2*quantLag {
		if k < rounds {
			if err := q.scatter(window, k); err != nil {
				return err
			}
		}
		if j := k - quantLag; j >= 0 && j < len(q.rsRecv[0]) {
			var err error
			if sends, err = q.reduceOwn(sends, ownEnc, &ownOff, j); err != nil {
				return err
			}
		}
		if g := k - 2*quantLag; g >= 0 {
			if err := q.gather(g); err != nil {
				return err
			}
		}
	}
	if err := window.drain(); err != nil {
		return err
	}
	if err := q.op.Wait(sends...); err != nil {
		return err
	}
	// Only now are all buffers free: a failed receive may still be landing
	// in one, so the error paths above drop them instead.
	window.release()
	q.op.Pool.Put(ownEnc)
	q.op.Pool.Put(q.rsBuf)
	q.op.Pool.Put(q.agBuf)
	return nil
}

// peer returns the rank d places after this one (d may be negative).
func (q *quantRun[T]) peer(d int) int { return mod(q.op.Rank()+d, q.op.Size()) }

// postReceives posts every receive of the operation at once, so that
// payloads land in place whenever they arrive and no send waits on this
// rank's progress. The messages of peer r-d are posted at index d-1, the
// order in which they are processed.
func (q *quantRun[T]) postReceives() {
	p, r := q.op.Size(), q.op.Rank()
	mine := q.blockLen(r)
	nseg, _ := quantSegments(mine, q.seg)
	mineEnc := encodedBlockSize(q.codec, mine, q.seg)
	agTotal := 0
	for d := 1; d < p; d++ {
		agTotal += encodedBlockSize(q.codec, q.blockLen(q.peer(-d)), q.seg)
	}
	q.rsBuf = q.op.Pool.Get((p - 1) * mineEnc)
	q.agBuf = q.op.Pool.Get(agTotal)
	q.rsRecv = make([][]*transport.Request, p-1)
	q.agRecv = make([][]*transport.Request, p-1)
	rsOff, agOff := 0, 0
	for d := 1; d < p; d++ {
		from := q.peer(-d)
		q.rsRecv[d-1] = q.postBlock(from, 0, q.rsBuf, &rsOff, mine, nseg)
		n := q.blockLen(from)
		count, _ := quantSegments(n, q.seg)
		q.agRecv[d-1] = q.postBlock(from, quantAllgatherStep, q.agBuf, &agOff, n, count)
	}
}

// postBlock posts the receives of the count segments of an n-element block
// from peer, at buf[*off:], advancing *off.
func (q *quantRun[T]) postBlock(from int, step uint32, buf []byte, off *int, n, count int) []*transport.Request {
	_, size := quantSegments(n, q.seg)
	reqs := make([]*transport.Request, count)
	for k := range count {
		m := min(size, n-k*size)
		enc := q.codec.EncodedSize(m)
		reqs[k] = q.op.Recv(from, step+uint32(k), buf[*off:*off+enc:*off+enc])
		*off += enc
	}
	return reqs
}

// scatter encodes segment k of every other rank's block and sends it to
// its owner, starting with the next rank so that at each moment the ranks
// send to different owners. Blocks with fewer segments are skipped.
func (q *quantRun[T]) scatter(w *sendWindow, k int) error {
	for d := 1; d < q.op.Size(); d++ {
		to := q.peer(d)
		blk := q.block(to)
		if count, _ := quantSegments(len(blk), q.seg); k >= count {
			continue
		}
		buf, err := w.acquire()
		if err != nil {
			return err
		}
		enc, err := encodeTo(q.codec, buf, q.segment(blk, k))
		if err != nil {
			return q.op.Fail(fmt.Errorf("encoding block %d for its owner: %w", to, err))
		}
		w.push(q.op.Send(to, uint32(k), enc))
	}
	return nil
}

// reduceChunk is how many values reduceOwn processes at a time for the
// fixed-width codecs: 64 KiB of float32, so the accumulator stays in L1/L2
// across the P-1 additions, the encoding and the decoding.
const reduceChunk = 16384

// reduceOwn reduces segment k of this rank's block and broadcasts it. It
// adds the peers' encodings into the segment in a fixed order (ranks r-1,
// r-2, ...) so that results are reproducible, encodes the reduced values
// once into enc[*off:], replaces them by the decoding of those bytes (so
// the owner holds exactly what everyone else will) and sends the same
// bytes to every peer, appending the sends, which reference enc, to sends.
//
// For the fixed-width codecs all of this runs chunk by chunk, one pass
// over cache-resident data instead of P+1 passes over the segment; the
// operations and their order per value are the same, so the result is too.
// A stochastic stream can only be cut at bucket boundaries, so its segment
// is one chunk.
func (q *quantRun[T]) reduceOwn(sends []*transport.Request, enc []byte, off *int, k int) ([]*transport.Request, error) {
	p := q.op.Size()
	seg := q.segment(q.block(q.op.Rank()), k)
	payloads := q.payloads[:0]
	for d := 1; d < p; d++ {
		payload, err := q.wait(q.rsRecv[d-1][k], len(seg))
		if err != nil {
			return sends, err
		}
		payloads = append(payloads, payload)
	}
	size := q.codec.EncodedSize(len(seg))
	out := enc[*off : *off+size : *off+size]
	*off += size
	w, chunk := fixedWidth(q.codec), len(seg)
	if w > 0 {
		chunk = reduceChunk
	}
	for lo := 0; lo < len(seg); lo += chunk {
		hi := min(lo+chunk, len(seg))
		blo, bhi := 0, size
		if w > 0 {
			blo, bhi = lo*w, hi*w
		}
		vals := seg[lo:hi:hi]
		for d, payload := range payloads {
			if err := decodeInto(q.codec, vals, payload[blo:bhi], true); err != nil {
				req := q.rsRecv[d][k]
				return sends, q.op.failAt(req.Peer, req.Tag.Step, fmt.Errorf("%w: from rank %d: %w", transport.ErrProtocol, req.Peer, err))
			}
		}
		if _, err := encodeTo(q.codec, out[blo:bhi], vals); err != nil {
			return sends, q.op.Fail(fmt.Errorf("encoding the reduced block %d: %w", q.op.Rank(), err))
		}
		// Decoding our own fresh encoding cannot fail short of a codec
		// bug, which must still not leave the replicas silently different.
		if err := decodeInto(q.codec, vals, out[blo:bhi], false); err != nil {
			return sends, q.op.Fail(fmt.Errorf("decoding own block %d: %w", q.op.Rank(), err))
		}
	}
	clear(payloads) // drop references to the receive buffer
	for d := 1; d < p; d++ {
		sends = append(sends, q.op.Send(q.peer(d), quantAllgatherStep+uint32(k), out))
	}
	return sends, nil
}

// gather decodes segment k of every other owner's reduced block into
// place, where that block has a segment k.
func (q *quantRun[T]) gather(k int) error {
	for d := 1; d < q.op.Size(); d++ {
		if k >= len(q.agRecv[d-1]) {
			continue
		}
		blk := q.block(q.peer(-d))
		if err := q.arrive(q.agRecv[d-1][k], q.segment(blk, k)); err != nil {
			return err
		}
	}
	return nil
}

// wait waits for one encoded segment of n values and returns its payload.
// A payload of the wrong size fails the operation on every rank: the
// sender's arguments differ from ours in a way the descriptor does not
// show.
func (q *quantRun[T]) wait(req *transport.Request, n int) ([]byte, error) {
	payload, err := q.op.WaitData(req)
	if err != nil {
		return nil, err
	}
	if want := q.codec.EncodedSize(n); len(payload) != want {
		return nil, failSize(q.op, req.Peer, len(payload), want)
	}
	return payload, nil
}

// arrive waits for one encoded segment and decodes it into dst. A payload
// the codec rejects fails the operation on every rank: its bytes are
// corrupt.
func (q *quantRun[T]) arrive(req *transport.Request, dst []T) error {
	payload, err := q.wait(req, len(dst))
	if err != nil {
		return err
	}
	if err := decodeInto(q.codec, dst, payload, false); err != nil {
		return q.op.failAt(req.Peer, req.Tag.Step, fmt.Errorf("%w: from rank %d: %w", transport.ErrProtocol, req.Peer, err))
	}
	return nil
}
