package fallback

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sparcml/sparcml/internal/wire"
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
	size       int // of the job, for the origin of a failure
	r          *inBuf
	m          *transport.Matcher
	maxMessage int64
	gate       fillGate
	onData     func(n int) // counts a received message
	// lowat, if not nil, sets the socket's receive low-water mark: how
	// many bytes must be queued before a waiting read wakes up.
	lowat func(n int)
	mark  int // the mark set last; 0 is the socket default, 1

	hdr        [wire.HeaderSize]byte
	reason     [wire.MaxReasonLen]byte
	sawGoodbye bool
	byeReason  string // the goodbye's payload: why the peer closed, if it had failed

	// The frame being read.
	inFrame bool
	hdrGot  int               // header bytes read (before inFrame)
	cur     wire.Header       // the decoded header (inFrame)
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
	switch fr.cur.Kind {
	case wire.Data:
		err = fr.readData(block)
	case wire.FailOp, wire.Goodbye:
		err = fr.readReason()
	default:
		return wire.ProtocolErrorf("unhandled frame kind %v", fr.cur.Kind)
	}
	if err == nil {
		fr.inFrame = false
	}
	return err
}

func (fr *frameReader) readHeader() error {
	fr.needBytes(wire.HeaderSize - fr.hdrGot)
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
	fr.hdrGot = 0
	h, err := wire.DecodeHeader(fr.hdr[:], fr.maxMessage)
	if err != nil {
		return err
	}
	return fr.startFrame(h)
}

// startFrame makes h, whose header has been read, the current frame.
func (fr *frameReader) startFrame(h wire.Header) error {
	if fr.sawGoodbye {
		return wire.ProtocolErrorf("%v frame after goodbye", h.Kind)
	}
	fr.inFrame, fr.cur = true, h
	fr.claimed, fr.claim, fr.got = false, transport.Claimed{}, 0
	return nil
}

// readReason reads the payload of a fail-op frame (a failure) or a
// goodbye (its text) and acts on it.
func (fr *frameReader) readReason() error {
	h := &fr.cur
	reason := fr.reason[:h.Length] // wire.DecodeHeader bounded it by wire.MaxReasonLen
	fr.needBytes(len(reason) - fr.got)
	if err := fr.readInto(reason, &fr.got, false); err != nil {
		if isTimeout(err) {
			return err
		}
		return payloadError(h, err)
	}
	if h.Kind == wire.Goodbye {
		fr.sawGoodbye, fr.byeReason = true, string(reason)
		return nil
	}
	f, err := transport.DecodeFailure(reason, fr.size)
	if err != nil {
		return fmt.Errorf("fail-op frame: %w", err)
	}
	fr.m.FailOp(h.Tag.Comm, h.Tag.Seq, f)
	return nil
}

// readData reads one message's payload where the matcher says: into the
// posted receive buffer (zero-copy), into an unexpected-message buffer, or
// nowhere (a failed operation's late message).
func (fr *frameReader) readData(block bool) error {
	h := &fr.cur
	n := int(h.Length) // wire.DecodeHeader bounded it by maxMessage
	if !fr.claimed {
		claim := fr.m.Claim
		if !block {
			claim = fr.m.TryClaim
		}
		c, err := claim(fr.peer, h.Tag, h.Desc, n)
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
// calls cost more than the wake-ups they save; from lowatMin on, the mark
// saves more than it costs. A mark never exceeds lowatCap, so that reading
// a very large payload still overlaps with its sending. Both values come
// from builds that differ only in them, alternated with scripts/ab-p2p.sh
// one message at a time and 16 in flight, from 128 KiB to 64 MiB
// (docs/DEFAULTS.md, "SO_RCVLOWAT").
const (
	lowatMin = 512 << 10
	lowatCap = 4 << 20
)

// readPayload fills dst[fr.got:] from the stream. For a large payload it first
// raises the socket's receive low-water mark to what is still to come, so
// that the reader sleeps until that much has arrived instead of waking for
// every segment: on a busy machine each of those wake-ups is a thread
// competing with the sender for a CPU, which makes large messages much
// slower than over a plain socket (`sparcml bench --op p2p --baseline`).
// The mark only ever asks for bytes
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
func payloadError(h *wire.Header, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %d-byte payload of %v frame (%v): %w", h.Length, h.Kind, h.Tag, err)
}

// isTimeout reports whether err is a read deadline passing: the read can
// be resumed.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
