package fallback

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

func TestHelloRoundTrip(t *testing.T) {
	h := hello{rank: 3, size: 8, conn: 1, connsPerPeer: 2}
	var b [helloSize]byte
	encodeHello(b[:], h)
	got, err := decodeHello(b[:])
	if err != nil || got != h {
		t.Fatalf("decodeHello(encodeHello(%+v)) = %+v, %v", h, got, err)
	}
	b[4]++
	if _, err := decodeHello(b[:]); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("wrong version: %v, want ErrProtocol", err)
	}
}

// whyFailure is the payload of a fail-op frame of rank 1 of 2.
var whyFailure = transport.AppendFailure(nil, &transport.RemoteFailure{Peer: 1, Code: transport.CodeInvalid, Reason: "why"})

type openGate struct{}

func (openGate) enterFill() bool { return true }
func (openGate) exitFill()       {}

// FuzzFrameReader feeds arbitrary bytes to a connection's reader: it must
// end with an error (the input always ends), never panic, and never
// allocate for a message more than MaxMessage.
func FuzzFrameReader(f *testing.F) {
	const maxMessage = 1 << 16
	data := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 1}, Desc: testDesc}
	f.Add(frameBytes(data, []byte("hello")))
	f.Add(append(frameBytes(data, []byte("a")), frameBytes(data, []byte("b"))...))
	f.Add(append(frameBytes(wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Comm: 1, Seq: 1}}, whyFailure),
		frameBytes(data, []byte("late"))...))
	f.Add(append(frameBytes(wire.Header{Kind: wire.Goodbye}, nil), frameBytes(data, nil)...))
	f.Add(frameBytes(data, make([]byte, 3000))[:100])
	f.Fuzz(func(t *testing.T, stream []byte) {
		fuzzFrameReader(t, stream, maxMessage, false)
		fuzzFrameReader(t, stream, maxMessage, true)
	})
}

// fuzzFrameReader reads stream through a 4 KiB buffered reader or, with
// scatter, through a 64-byte one with an emulated readv, so that payloads
// take the direct path and the frames after them land in the buffer.
func fuzzFrameReader(t *testing.T, stream []byte, maxMessage int64, scatter bool) {
	m := transport.NewMatcher(0, 0)
	// A receive posted for one tag exercises the zero-copy path (with
	// scatter, one larger than the buffer: the direct read).
	size, src := 8, bytes.NewReader(stream)
	r := newInBuf(src, 4096)
	if scatter {
		size, r = 200, newInBuf(src, 64)
		r.two = readTwoFrom(src)
	}
	postedTag := transport.Tag{Comm: 1, Seq: 2}
	posted := m.Post(1, postedTag, testDesc, make([]byte, size))
	fr := &frameReader{
		peer:       1,
		size:       2,
		r:          r,
		m:          m,
		maxMessage: maxMessage,
		gate:       openGate{},
		onData:     func(n int) {},
	}
	err := readAll(fr)
	if err == nil {
		t.Fatal("reader returned no error at the end of its input")
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("unexpected error kind: %v", err)
	}
	if done, err := posted.Test(); done && err == nil && int64(len(posted.Data())) > maxMessage {
		t.Fatalf("received %d bytes, limit %d", len(posted.Data()), maxMessage)
	}
	m.Abort(errors.New("done"))
}

// readAll reads frames until an error, which it returns, as a connection's
// readers do between them.
func readAll(fr *frameReader) error {
	for {
		if err := fr.readFrame(true); err != nil {
			return err
		}
	}
}
