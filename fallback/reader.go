package fallback

import (
	"errors"
	"fmt"
	"io"

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

	hdr        [headerSize]byte
	reason     [maxReasonLen]byte
	sawGoodbye bool
	byeReason  string // the goodbye's payload: why the peer closed, if it had failed
}

// readBufferSize is the size of the buffered reader in front of the
// socket. Headers and small payloads are read through it (one system call
// for many small frames); of a larger payload, at most this much is copied
// out of it and the rest is read straight into the receive buffer.
const readBufferSize = 8 << 10

// run reads frames until an error, which it returns. After a goodbye
// frame, the peer's closing shows up as the returned error with
// sawGoodbye set.
func (fr *frameReader) run() error {
	for {
		if err := fr.readFrame(); err != nil {
			return err
		}
	}
}

func (fr *frameReader) readFrame() error {
	fr.needBytes(headerSize)
	if err := fr.r.ReadFull(fr.hdr[:]); err != nil {
		if err == io.EOF {
			return err // clean end between frames
		}
		return fmt.Errorf("reading frame header: %w", err)
	}
	h, err := decodeHeader(fr.hdr[:], fr.maxMessage)
	if err != nil {
		return err
	}
	if fr.sawGoodbye {
		return protocolErrorf("%v frame after goodbye", h.kind)
	}
	switch h.kind {
	case frameData:
		return fr.readData(&h)
	case frameFailOp:
		return fr.readFailOp(&h)
	case frameGoodbye:
		reason := fr.reason[:h.length] // decodeHeader bounded it by maxReasonLen
		fr.needBytes(len(reason))
		if _, err := io.ReadFull(fr.r, reason); err != nil {
			return payloadError(&h, err)
		}
		fr.sawGoodbye, fr.byeReason = true, string(reason)
		return nil
	}
	return protocolErrorf("unhandled frame kind %v", h.kind)
}

// readData reads one message's payload where the matcher says: into the
// posted receive buffer (zero-copy), into an unexpected-message buffer, or
// nowhere (a failed operation's late message).
func (fr *frameReader) readData(h *header) error {
	n := int(h.length) // decodeHeader bounded it by maxMessage
	dst, done, err := fr.m.Claim(fr.peer, h.tag, h.desc, n)
	if err != nil {
		return err
	}
	if dst == nil {
		fr.needBytes(n)
		if err := fr.r.Discard(n); err != nil {
			return payloadError(h, err)
		}
		fr.onData(n)
		done()
		return nil
	}
	if !fr.gate.enterFill() {
		return errStopping
	}
	err = fr.readPayload(dst)
	if err == nil {
		// Counted before the completion, so that a caller who has seen
		// its receive complete also sees it in Stats.
		fr.onData(n)
		done()
	}
	fr.gate.exitFill()
	if err != nil {
		return payloadError(h, err)
	}
	return nil
}

// Low-water marks for large payloads (see readPayload). Below lowatMin a
// payload arrives in few segments and the two setsockopt calls are not
// worth it. A mark never exceeds lowatCap, so that reading a very large
// payload still overlaps with its sending; measured on loopback, 4 MiB
// beat 256 KiB and 1 MiB for 8-64 MiB messages and matched an unbounded
// mark at 2 MiB.
const (
	lowatMin = 64 << 10
	lowatCap = 4 << 20
)

// readPayload fills dst from the stream. For a large payload it first
// raises the socket's receive low-water mark to what is still to come, so
// that the reader sleeps until that much has arrived instead of waking for
// every segment: on a busy machine each of those wake-ups is a thread
// competing with the sender for a CPU, and a 1 MiB message could take
// twice as long as over a plain socket. The mark only ever asks for bytes
// this frame still owes (a mark the stream cannot meet would never wake
// the reader); needBytes puts it back at 1 before anything else is read
// from the socket.
func (fr *frameReader) readPayload(dst []byte) error {
	if fr.lowat == nil || len(dst)-fr.r.Buffered() < lowatMin {
		fr.needBytes(len(dst))
		return fr.r.ReadFull(dst)
	}
	for got := 0; got < len(dst); {
		// Bytes already in the buffer are not in the socket: they
		// must not count towards the mark.
		want := min(len(dst)-got-fr.r.Buffered(), lowatCap)
		if want < lowatMin {
			want = 1 // the tail: not worth a system call
		}
		fr.setMark(want)
		n, err := fr.r.Read(dst[got:])
		got += n
		if err != nil && got < len(dst) {
			return err
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

func (fr *frameReader) readFailOp(h *header) error {
	reason := fr.reason[:h.length] // decodeHeader bounded it by maxReasonLen
	if _, err := io.ReadFull(fr.r, reason); err != nil {
		return payloadError(h, err)
	}
	fr.m.FailOp(h.tag.Comm, h.tag.Seq, &transport.RemoteFailure{Peer: fr.peer, Reason: string(reason)})
	return nil
}

// payloadError describes a read that ended inside a frame: the header
// promised more bytes, so even a plain EOF is unexpected.
func payloadError(h *header, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %d-byte payload of %v frame (%v): %w", h.length, h.kind, h.tag, err)
}
