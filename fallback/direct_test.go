package fallback

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// TestAppendFrameSkipsWritten checks the vector a partly written frame is
// finished with: for every offset it must be exactly the rest of the
// frame, with no empty slices.
func TestAppendFrameSkipsWritten(t *testing.T) {
	bufs := [][]byte{reference[:3], nil, reference[100:200], {}, reference[5000:10000]}
	h := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 2}, Desc: testDesc, Length: 3 + 100 + 5000}
	var hdr [wire.HeaderSize]byte
	wire.EncodeHeader(hdr[:], &h)
	whole := append([]byte(nil), hdr[:]...)
	for _, b := range bufs {
		whole = append(whole, b...)
	}
	it := &sendItem{hdr: h, bufs: bufs}
	if it.frameLen() != len(whole) {
		t.Fatalf("frameLen %d, frame has %d bytes", it.frameLen(), len(whole))
	}
	for off := 0; off <= len(whole); off++ {
		it.off = off
		iov := appendFrame(nil, hdr[:], it)
		var got []byte
		for _, b := range iov {
			if len(b) == 0 {
				t.Fatalf("off %d: empty slice in the vector", off)
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, whole[off:]) {
			t.Fatalf("off %d: vector holds %d bytes, not the %d bytes left of the frame", off, len(got), len(whole)-off)
		}
	}
}

// chunkReader hands out its stream in random-sized pieces, like a socket,
// and counts what has been consumed.
type chunkReader struct {
	data     []byte
	pos      int
	rng      *rand.Rand
	onRead   func(pos int)
	maxChunk int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	r.onRead(r.pos)
	return r.readOn(p)
}

// readOn is the rest of one system call that already woke up: the
// low-water mark, which only decides when a read wakes, does not apply.
func (r *chunkReader) readOn(p []byte) (int, error) {
	if r.pos == len(r.data) {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data)-r.pos, 1+r.rng.IntN(r.maxChunk))
	copy(p, r.data[r.pos:r.pos+n])
	r.pos += n
	return n, nil
}

// TestReadPayloadLowWaterMark reads frames of many sizes through the
// reader with a recording low-water mark. The mark must never ask for more
// bytes than the current frame still owes (the reader would sleep for
// good), must be back at 1 before anything past the frame is read, and
// the payloads must arrive intact, posted or unexpected.
func TestReadPayloadLowWaterMark(t *testing.T) {
	sizes := []int{0, 100, lowatMin - 1, lowatMin, lowatMin + 5, 300 << 10, 1 << 20, lowatCap + 12345, 7}
	var stream []byte
	var ends []int // stream offset where each frame's payload ends
	for i, n := range sizes {
		h := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: uint64(i)}, Desc: testDesc, Length: uint64(n)}
		stream = append(stream, frameBytes(h, bigPayload(i, n))...)
		ends = append(ends, len(stream))
	}
	frameEnd := func(pos int) int { // end of the payload pos lies in (or before)
		for _, e := range ends {
			if pos < e {
				return e
			}
		}
		return len(stream)
	}
	for _, tc := range []struct {
		maxChunk int
		scatter  bool
	}{{1 << 10, false}, {64 << 10, false}, {1 << 20, false}, {1 << 10, true}, {64 << 10, true}, {1 << 20, true}} {
		maxChunk := tc.maxChunk
		t.Run(fmt.Sprintf("chunks=%d/scatter=%v", maxChunk, tc.scatter), func(t *testing.T) {
			m := transport.NewMatcher(0, 0)
			posted := map[int]*transport.Request{}
			for i, n := range sizes {
				if i%2 == 0 { // odd frames arrive unexpected
					posted[i] = m.Post(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, make([]byte, n))
				}
			}
			mark, markEnd, raised := 1, 0, 0
			src := &chunkReader{data: stream, rng: rand.New(rand.NewPCG(uint64(maxChunk), 7)), maxChunk: maxChunk}
			src.onRead = func(pos int) {
				if mark != 1 && pos >= markEnd {
					t.Fatalf("read at offset %d past the frame ending at %d with the mark still at %d", pos, markEnd, mark)
				}
			}
			fr := &frameReader{
				peer: 1, size: 2, r: newInBuf(src, readBufferSize), m: m, maxMessage: 1 << 30,
				gate: openGate{}, onData: func(int) {},
				lowat: func(n int) {
					if n > 1 {
						markEnd = frameEnd(src.pos)
						if src.pos+n > markEnd {
							t.Fatalf("mark %d at offset %d: the frame ends at %d", n, src.pos, markEnd)
						}
						raised++
					}
					mark = n
				},
			}
			if tc.scatter {
				fr.r.two = readTwoFrom(src)
			}
			var err error
			for err == nil {
				err = fr.readFrame(true)
			}
			if err != io.EOF {
				t.Fatalf("reader ended with %v, want EOF", err)
			}
			if mark != 1 {
				t.Fatalf("mark left at %d", mark)
			}
			if raised == 0 {
				t.Fatal("the mark was never raised")
			}
			for i, n := range sizes {
				r := posted[i]
				if r == nil {
					r = m.Post(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, nil)
				}
				if done, err := r.Test(); !done || err != nil {
					t.Fatalf("frame %d: done %v, err %v", i, done, err)
				}
				if !bytes.Equal(r.Data(), bigPayload(i, n)) {
					t.Fatalf("frame %d: wrong payload", i)
				}
			}
		})
	}
}

// bigPayload is n reference bytes for frame i, wrapping around the
// reference for sizes beyond it.
func bigPayload(i, n int) []byte {
	b := make([]byte, n)
	for k := 0; k < n; {
		k += copy(b[k:], reference[(i*4099+k)%len(reference):])
	}
	return b
}

// TestConcurrentSendsOneConnection has several goroutines send on the
// same connection at once, in both directions, with sizes around the
// direct-write limit: direct writes, partial ones finished by the writer,
// and queued frames must keep every message intact and in its place.
func TestConcurrentSendsOneConnection(t *testing.T) {
	for _, sockBuf := range []int{0, 64 << 10} {
		t.Run(fmt.Sprintf("sockbuf=%d", sockBuf), func(t *testing.T) {
			checkNoLeaks(t)
			const senders, msgs = 6, 16
			j := startJob(t, 2, func(c *Config) { c.SocketBuffer = sockBuf })
			ctx := waitCtx(t)
			tagOf := func(g, i int) transport.Tag { return transport.Tag{Comm: 4, Seq: uint64(g), Step: uint32(i)} }
			sizeOf := func(src, g, i int) int {
				rng := rand.New(rand.NewPCG(uint64(src*1000+g), uint64(i)))
				switch rng.IntN(4) {
				case 0:
					return rng.IntN(200)
				case 1:
					return directMax - 1000 + rng.IntN(2000) // on both sides of the limit
				default:
					return rng.IntN(2 << 20) // mostly above directMax: queued for the writer
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 2*(senders+1))
			for r, tr := range j.ts {
				peer := 1 - r
				for g := range senders {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var sends []*transport.Request
						for i := range msgs {
							p := payload(r, peer, tagOf(g, i), sizeOf(r, g, i))
							h := len(p) / 2
							sends = append(sends, tr.Send(peer, tagOf(g, i), testDesc, p[:h], p[h:]))
							// Odd senders wait for each message, as a
							// blocking send does: the connection often
							// goes idle and Send writes directly while
							// others are queuing.
							if g%2 == 1 {
								if err := sends[i].Wait(ctx); err != nil {
									errs <- fmt.Errorf("rank %d sender %d: %w", r, g, err)
									return
								}
							}
						}
						if err := waitAll(ctx, sends); err != nil {
							errs <- fmt.Errorf("rank %d sender %d: %w", r, g, err)
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					var recvs []*transport.Request
					for i := range msgs {
						for g := range senders {
							n := sizeOf(peer, g, i)
							recvs = append(recvs, tr.Recv(peer, tagOf(g, i), testDesc, make([]byte, n)))
						}
					}
					for _, rv := range recvs {
						if err := rv.Wait(ctx); err != nil {
							errs <- fmt.Errorf("rank %d: %v: %w", r, rv, err)
							return
						}
						g, i := int(rv.Tag.Seq), int(rv.Tag.Step)
						if !bytes.Equal(rv.Data(), payload(peer, r, rv.Tag, sizeOf(peer, g, i))) {
							errs <- fmt.Errorf("rank %d: %v: wrong payload", r, rv)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, tr := range j.ts {
				if st := tr.Stats(); st.MsgsSent != senders*msgs || st.MsgsRecv != senders*msgs {
					t.Errorf("rank %d stats %+v, want %d messages each way", tr.rank, st, senders*msgs)
				}
			}
		})
	}
}

// readTwoFrom emulates a socket's readv over r: it fills a, and only if a
// is full goes on into b with what r has at once.
func readTwoFrom(r io.Reader) func(a, b []byte) (int, error) {
	return func(a, b []byte) (int, error) {
		n, err := r.Read(a)
		if n < len(a) || err != nil {
			return n, err
		}
		var m int
		if c, ok := r.(interface{ readOn([]byte) (int, error) }); ok {
			m, _ = c.readOn(b)
		} else {
			m, _ = r.Read(b)
		}
		return n + m, nil
	}
}
