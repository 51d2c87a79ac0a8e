package fallback

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sparcml/sparcml/transport"
)

// errStopping: the transport is shutting down and the reader must not
// start writing into a receive buffer.
var errStopping = errors.New("transport stopping")

// fillGate is how the transport keeps readers out of receive buffers while
// it fails them: enterFill reports whether the reader may start filling a
// buffer, exitFill says it has finished with it.
type fillGate interface {
	enterFill() bool
	exitFill()
}

// frameReader reads the frames of one connection from one peer and hands
// them to the matcher. It is independent of the rest of the transport so
// that it can be fuzzed on arbitrary bytes.
//
// Its progress through the current frame lives in the struct, not on a
// goroutine's stack: a read that ends with a timeout (a caller reading for
// itself whose wait ran out, see readshare.go) loses nothing, and whoever
// reads the connection next resumes the frame where it stopped.
type frameReader struct {
	peer       int
	r          *inBuf
	m          *transport.Matcher
	maxMessage int64
	gate       fillGate
	onData     func(n int) // counts a received message
	// lowat, if not nil, sets the socket's receive low-water mark: how
	// many bytes must be queued before a waiting read wakes up.
	lowat func(n int)
	mark  int // the mark set last; 0 is the socket default, 1

	// want: the caller reading is waiting for the receive tagged
	// wantTag from this peer, whose payload may be read speculatively
	// (readSpeculative). Set and cleared by that caller.
	want    bool
	wantTag transport.Tag
	// missed: the last speculative read was another frame's, so the next
	// header is read the normal way (a miss costs a copy of what landed
	// in the receive's buffer; this bounds misses to every other frame).
	missed bool

	hdr        [headerSize]byte
	reason     [maxReasonLen]byte
	sawGoodbye bool
	byeReason  string // the goodbye's payload: why the peer closed, if it had failed

	// The frame being read.
	inFrame bool
	hdrGot  int               // header bytes read (before inFrame)
	cur     header            // the decoded header (inFrame)
	claimed bool              // data frame: the matcher has said where it goes
	claim   transport.Claimed // ... there (Dst), and what completes it
	got     int               // payload bytes read so far
}

// readBufferSize is the size of the buffered reader in front of the
// socket. Headers and small payloads are read through it (one system call
// for many small frames); of a larger payload, at most this much is copied
// out of it and the rest is read straight into the receive buffer.
const readBufferSize = 8 << 10

// betweenFrames reports whether the next byte read starts a frame.
func (fr *frameReader) betweenFrames() bool { return !fr.inFrame && fr.hdrGot == 0 }

// readFrame reads the rest of the current frame, or a whole new one. With
// block false it does not wait for the unexpected-message budget: it
// returns transport.ErrNoBudget instead, and a later call resumes. A
// timeout from the socket is returned as it is, also resumable; any
// other error ends the connection.
func (fr *frameReader) readFrame(block bool) error {
	if !fr.inFrame {
		if err := fr.readHeader(); err != nil {
			return err
		}
	}
	var err error
	switch fr.cur.kind {
	case frameData:
		err = fr.readData(block)
	case frameFailOp, frameGoodbye:
		err = fr.readReason()
	default:
		return protocolErrorf("unhandled frame kind %v", fr.cur.kind)
	}
	if err == nil {
		fr.inFrame = false
	}
	return err
}

func (fr *frameReader) readHeader() error {
	if fr.want && !fr.missed && fr.hdrGot == 0 && fr.r.Buffered() == 0 && fr.r.three != nil {
		if started, err := fr.readSpeculative(); started || err != nil {
			return err
		}
	}
	fr.needBytes(headerSize - fr.hdrGot)
	if err := fr.readInto(fr.hdr[:], &fr.hdrGot, false); err != nil {
		switch {
		case isTimeout(err):
			return err
		case err == io.EOF && fr.hdrGot == 0:
			return err // clean end between frames
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading frame header: %w", err)
	}
	fr.hdrGot, fr.missed = 0, false
	h, err := decodeHeader(fr.hdr[:], fr.maxMessage)
	if err != nil {
		return err
	}
	return fr.startFrame(h)
}

// startFrame makes h, whose header has been read, the current frame.
func (fr *frameReader) startFrame(h header) error {
	if fr.sawGoodbye {
		return protocolErrorf("%v frame after goodbye", h.kind)
	}
	fr.inFrame, fr.cur = true, h
	fr.claimed, fr.claim, fr.got = false, transport.Claimed{}, 0
	return nil
}

// readSpeculative reads the next frame, with nothing buffered, for a
// caller waiting for one receive whose buffer is larger than the read
// buffer: one readv into the header, that buffer and the read buffer. If
// the frame is the receive's message, the start of its payload (often all
// of it) is in place: a round trip costs one read and no copy instead of
// a read into the read buffer, a copy out of it and a read of the rest.
// If it is another frame, the bytes after its header move to the read
// buffer. Meanwhile the receive is reserved (transport.Matcher.Reserve),
// so nothing else fills or fails it, and the fill gate is held: a read
// that waits for data holds both for at most waiterTick (the waiter's
// read deadline), which bounds how late a failure reaches the receive. started reports that the frame's
// header was read and the frame started; false with a nil error means
// nothing was read past what fr.hdrGot says, and the normal path goes on.
func (fr *frameReader) readSpeculative() (started bool, err error) {
	buf, ok := fr.m.Reserve(fr.peer, fr.wantTag, fr.r.size()+1)
	if !ok {
		return false, nil
	}
	if !fr.gate.enterFill() {
		fr.m.Unreserve(fr.peer, fr.wantTag)
		return false, errStopping
	}
	fr.needBytes(headerSize)
	n, _ := fr.r.fillAround(fr.hdr[:], buf)
	if n < headerSize {
		// Nothing (an error, or a deadline: the normal path meets it
		// again and reports it as for any header), or part of a header
		// (nothing in buf): the normal path reads the rest.
		fr.hdrGot = n
		fr.gate.exitFill()
		fr.m.Unreserve(fr.peer, fr.wantTag)
		return false, nil
	}
	landed := min(n-headerSize, len(buf)) // bytes in buf; any more are buffered
	h, err := decodeHeader(fr.hdr[:], fr.maxMessage)
	if err == nil && fr.sawGoodbye {
		err = protocolErrorf("%v frame after goodbye", h.kind)
	}
	if err != nil {
		fr.gate.exitFill()
		fr.m.Unreserve(fr.peer, fr.wantTag)
		return false, err
	}
	if h.kind != frameData || h.tag != fr.wantTag {
		// Another frame: its bytes go back in front of the buffered
		// ones, copied out of buf before buf is given back.
		fr.r.unread(buf[:landed])
		fr.gate.exitFill()
		fr.m.Unreserve(fr.peer, fr.wantTag)
		fr.missed = true
		return true, fr.startFrame(h)
	}
	// The receive's message. Bytes in buf past its payload start the
	// next frame.
	n = int(h.length) // decodeHeader bounded it by maxMessage
	if landed > n {
		fr.r.unread(buf[n:landed])
		landed = n
	}
	c, err := fr.m.ClaimReserved(fr.peer, h.tag, h.desc, n, landed)
	fr.gate.exitFill()
	if err != nil {
		return false, err
	}
	fr.startFrame(h) // cannot fail: sawGoodbye was checked
	fr.claimed, fr.claim, fr.got = true, c, landed
	return true, nil
}

// readReason reads the text of a fail-op or goodbye frame and acts on it.
func (fr *frameReader) readReason() error {
	h := &fr.cur
	reason := fr.reason[:h.length] // decodeHeader bounded it by maxReasonLen
	fr.needBytes(len(reason) - fr.got)
	if err := fr.readInto(reason, &fr.got, false); err != nil {
		if isTimeout(err) {
			return err
		}
		return payloadError(h, err)
	}
	if h.kind == frameGoodbye {
		fr.sawGoodbye, fr.byeReason = true, string(reason)
		return nil
	}
	fr.m.FailOp(h.tag.Comm, h.tag.Seq, &transport.RemoteFailure{Peer: fr.peer, Reason: string(reason)})
	return nil
}

// readData reads one message's payload where the matcher says: into the
// posted receive buffer (zero-copy), into an unexpected-message buffer, or
// nowhere (a failed operation's late message).
func (fr *frameReader) readData(block bool) error {
	h := &fr.cur
	n := int(h.length) // decodeHeader bounded it by maxMessage
	if !fr.claimed {
		claim := fr.m.Claim
		if !block {
			claim = fr.m.TryClaim
		}
		c, err := claim(fr.peer, h.tag, h.desc, n)
		if err != nil {
			return err
		}
		fr.claimed, fr.claim = true, c
	}
	dst := fr.claim.Dst()
	if dst == nil {
		if err := fr.discard(n); err != nil {
			return err
		}
		fr.onData(n)
		fr.claim.Finish()
		return nil
	}
	if !fr.gate.enterFill() {
		return errStopping
	}
	err := fr.readPayload(dst)
	if err == nil {
		// Counted before the completion, so that a caller who has seen
		// its receive complete also sees it in Stats.
		fr.onData(n)
		fr.claim.Finish()
	}
	fr.gate.exitFill()
	if err != nil && !isTimeout(err) {
		return payloadError(h, err)
	}
	return err
}

// discard skips the rest of an n-byte payload.
func (fr *frameReader) discard(n int) error {
	fr.needBytes(n - fr.got)
	for fr.got < n {
		k, err := fr.r.Skip(n - fr.got)
		fr.got += k
		if err != nil && fr.got < n {
			if isTimeout(err) {
				return err
			}
			return payloadError(&fr.cur, err)
		}
	}
	return nil
}

// Low-water marks for large payloads (see readPayload). Below lowatMin
// still to come, a payload arrives in few segments and the two setsockopt
// calls are not worth it: with the mark from 64 KiB, messages of 128 KiB,
// 256 KiB and 512 KiB sent one at a time took 0.84 / 0.90 / 0.91 of a
// plain socket's throughput; from 512 KiB, 0.94 / 0.94 / 1.22 (medians of
// 8 alternated rounds; 16 in flight and 1-16 MiB messages showed no
// difference; commands in docs/PERFORMANCE.md, "p2p in session 6"). A mark never exceeds lowatCap, so that reading a very large
// payload still overlaps with its sending; measured on loopback, 4 MiB
// beat 256 KiB and 1 MiB for 8-64 MiB messages and matched an unbounded
// mark at 2 MiB.
const (
	lowatMin = 512 << 10
	lowatCap = 4 << 20
)

// readPayload fills dst[fr.got:] from the stream. For a large payload it first
// raises the socket's receive low-water mark to what is still to come, so
// that the reader sleeps until that much has arrived instead of waking for
// every segment: on a busy machine each of those wake-ups is a thread
// competing with the sender for a CPU, and a 1 MiB message could take
// twice as long as over a plain socket. The mark only ever asks for bytes
// this frame still owes (a mark the stream cannot meet would never wake
// the reader); needBytes puts it back at 1 before anything else is read
// from the socket.
func (fr *frameReader) readPayload(dst []byte) error {
	if fr.lowat == nil || len(dst)-fr.got-fr.r.Buffered() < lowatMin {
		fr.needBytes(len(dst) - fr.got)
		return fr.readInto(dst, &fr.got, false)
	}
	for fr.got < len(dst) {
		// Bytes already in the buffer are not in the socket: they
		// must not count towards the mark.
		want := min(len(dst)-fr.got-fr.r.Buffered(), lowatCap)
		if want < lowatMin {
			want = 1 // the tail: not worth a system call
		}
		fr.setMark(want)
		if err := fr.readInto(dst, &fr.got, true); err != nil {
			return err
		}
	}
	return nil
}

// readInto reads dst[*got:], advancing *got, until dst is full or, with
// once, after one read. Its progress is in *got, so a read that fails (a
// timeout, say) loses nothing; the error is the source's, unwrapped.
func (fr *frameReader) readInto(dst []byte, got *int, once bool) error {
	for *got < len(dst) {
		n, err := fr.r.Read(dst[*got:])
		*got += n
		if err != nil && *got < len(dst) {
			return err
		}
		if n == 0 && err == nil {
			return io.ErrNoProgress
		}
		if once {
			return nil
		}
	}
	return nil
}

// setMark sets the low-water mark to n unless it is there already.
func (fr *frameReader) setMark(n int) {
	if fr.mark == 0 {
		fr.mark = 1 // the socket's default
	}
	if n != fr.mark {
		fr.lowat(n)
		fr.mark = n
	}
}

// needBytes is called before reading n bytes outside a large payload: if
// they are not all buffered, the read may go to the socket, and a mark
// left raised by the previous payload must come back to 1 first (a mark
// the stream cannot meet would never wake the reader). The reset is lazy
// because when frames stream back to back the read that ended the
// previous payload has usually buffered the next header already (see
// inBuf), and then the mark goes straight to the next payload's value:
// one system call per message saved.
func (fr *frameReader) needBytes(n int) {
	if fr.lowat != nil && fr.mark > 1 && fr.r.Buffered() < n {
		fr.setMark(1)
	}
}

// payloadError describes a read that ended inside a frame: the header
// promised more bytes, so even a plain EOF is unexpected.
func payloadError(h *header, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %d-byte payload of %v frame (%v): %w", h.length, h.kind, h.tag, err)
}

// isTimeout reports whether err is a read deadline passing: the read can
// be resumed.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
