package fallback

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/stretchr/testify/require"
)

// vecStream plays a socket for a frame reader: Read, and readv over two or
// three buffers (filled in order, as the kernel does), at most chunk bytes
// per call when chunk > 0. duringRead, if set, runs inside every
// three-buffer read, as another goroutine would while the reader sits in
// the system call.
type vecStream struct {
	data       []byte
	chunk      int
	threes     int // three-buffer reads that returned data
	duringRead func()
}

func (s *vecStream) readv(bufs ...[]byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	limit := len(s.data)
	if s.chunk > 0 {
		limit = min(limit, s.chunk)
	}
	n := 0
	for _, b := range bufs {
		k := copy(b, s.data[n:limit])
		n += k
		if k < len(b) {
			break
		}
	}
	s.data = s.data[n:]
	return n, nil
}

func (s *vecStream) Read(p []byte) (int, error) { return s.readv(p) }

func (s *vecStream) three(a, b, c []byte) (int, error) {
	if s.duringRead != nil {
		s.duringRead()
	}
	n, err := s.readv(a, b, c)
	if n > 0 {
		s.threes++
	}
	return n, err
}

// specReader returns a frame reader over stream with a 64-byte read
// buffer (so that receives of more than 64 bytes are read speculatively)
// and the matcher it delivers to.
func specReader(s *vecStream) (*frameReader, *transport.Matcher) {
	m := transport.NewMatcher(0, 0)
	r := newInBuf(s, 64)
	r.two = func(a, b []byte) (int, error) { return s.readv(a, b) }
	r.three = s.three
	fr := &frameReader{peer: 1, r: r, m: m, maxMessage: 1 << 20, gate: openGate{}, onData: func(int) {}}
	return fr, m
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

var (
	tagA = transport.Tag{Comm: 1, Seq: 10}
	tagB = transport.Tag{Comm: 1, Seq: 11}
)

func dataFrame(tag transport.Tag, payload []byte) []byte {
	return frameBytes(header{kind: frameData, tag: tag, desc: testDesc}, payload)
}

// readUntil reads frames, as a waiter for tag A, until req completes.
func readUntil(t *testing.T, fr *frameReader, req *transport.Request) {
	t.Helper()
	fr.want, fr.wantTag = true, req.Tag
	defer func() { fr.want = false }()
	for i := 0; !req.Completed(); i++ {
		require.Less(t, i, 10, "request still pending after 10 frames")
		require.NoError(t, fr.readFrame(false))
	}
}

// TestSpeculativeHit: the waited-for message, of every length around the
// receive buffer's, lands where it belongs, and the frame after it is read
// intact.
func TestSpeculativeHit(t *testing.T) {
	for _, n := range []int{65, 100, 199, 200, 201, 300, 1000} {
		payload, next := pattern(n, 1), pattern(77, 9)
		s := &vecStream{data: append(dataFrame(tagA, payload), dataFrame(tagB, next)...)}
		fr, m := specReader(s)
		buf := make([]byte, 200)
		a := m.Post(1, tagA, testDesc, buf)
		readUntil(t, fr, a)
		require.NoError(t, a.Err())
		require.Equal(t, payload, a.Data(), "payload of %d bytes into a 200-byte buffer", n)
		require.Equal(t, 1, s.threes, "the message was not read speculatively")
		if n <= len(buf) {
			require.Same(t, &buf[0], &a.Data()[0], "a message that fits lands in the receive's buffer")
		}
		b := m.Post(1, tagB, testDesc, nil)
		readUntil(t, fr, b)
		require.Equal(t, next, b.Data())
		posted, unexpected := m.Pending()
		require.Zero(t, posted+unexpected)
	}
}

// TestSpeculativeMiss: when another frame comes first, what landed in the
// waited-for receive's buffer is read again as that frame's, whatever its
// size (more than the read buffer holds too), the receive stays posted and
// gets its own message next.
func TestSpeculativeMiss(t *testing.T) {
	for _, n := range []int{0, 10, 150, 500} {
		other, mine := pattern(n, 3), pattern(200, 5)
		failOp := frameBytes(header{kind: frameFailOp, tag: transport.Tag{Comm: 2, Seq: 1}}, []byte("elsewhere"))
		stream := append(append(dataFrame(tagB, other), failOp...), dataFrame(tagA, mine)...)
		s := &vecStream{data: stream}
		fr, m := specReader(s)
		a := m.Post(1, tagA, testDesc, make([]byte, 200))
		readUntil(t, fr, a)
		require.NoError(t, a.Err())
		require.Equal(t, mine, a.Data())
		b := m.Post(1, tagB, testDesc, nil)
		require.True(t, b.Completed(), "the other message was not delivered")
		require.True(t, bytes.Equal(other, b.Data()), "other message of %d bytes: %q", n, b.Data())
	}
}

// TestSpeculativeShortReads: a read that ends inside the header, or inside
// the payload, leaves nothing lost.
func TestSpeculativeShortReads(t *testing.T) {
	for _, chunk := range []int{1, 20, 48, 49, 100, 247} {
		payload, next := pattern(200, 1), pattern(90, 2)
		s := &vecStream{data: append(dataFrame(tagA, payload), dataFrame(tagB, next)...), chunk: chunk}
		fr, m := specReader(s)
		a := m.Post(1, tagA, testDesc, make([]byte, 200))
		readUntil(t, fr, a)
		require.Equal(t, payload, a.Data(), "reads of %d bytes", chunk)
		b := m.Post(1, tagB, testDesc, nil)
		readUntil(t, fr, b)
		require.Equal(t, next, b.Data(), "reads of %d bytes", chunk)
	}
}

// TestSpeculativeFailDuringRead: an operation failed while the reader may
// be writing into its receive's buffer fails only once the read is over
// (the caller must not get its buffer back before), and the stream stays
// in step: whether the frame read was the receive's message or another.
func TestSpeculativeFailDuringRead(t *testing.T) {
	cause := errors.New("failed meanwhile")
	for _, mineFirst := range []bool{true, false} {
		mine, other := pattern(200, 1), pattern(120, 4)
		stream := append(dataFrame(tagA, mine), dataFrame(tagB, other)...)
		if !mineFirst {
			stream = append(dataFrame(tagB, other), dataFrame(tagA, mine)...)
		}
		s := &vecStream{data: stream}
		fr, m := specReader(s)
		a := m.Post(1, tagA, testDesc, make([]byte, 200))
		s.duringRead = func() {
			if s.threes == 0 {
				m.FailOp(tagA.Comm, tagA.Seq, cause)
				require.False(t, a.Completed(), "failed while its buffer was being read into")
			}
		}
		fr.want, fr.wantTag = true, tagA
		require.NoError(t, fr.readFrame(false))
		require.ErrorIs(t, a.Err(), cause)
		for range 2 {
			if err := fr.readFrame(false); err != nil {
				require.ErrorIs(t, err, io.EOF)
			}
		}
		b := m.Post(1, tagB, testDesc, nil)
		require.True(t, b.Completed())
		require.Equal(t, other, b.Data(), "mine first: %v", mineFirst)
	}
}

// TestSpeculativeMismatch: the waited-for tag with another collective's
// descriptor fails the receive with a mismatch, as without speculation.
func TestSpeculativeMismatch(t *testing.T) {
	wrong := testDesc
	wrong.Count++
	s := &vecStream{data: append(frameBytes(header{kind: frameData, tag: tagA, desc: wrong}, pattern(200, 1)),
		dataFrame(tagB, []byte("after"))...)}
	fr, m := specReader(s)
	a := m.Post(1, tagA, testDesc, make([]byte, 200))
	readUntil(t, fr, a)
	var mm *transport.MismatchError
	require.ErrorAs(t, a.Err(), &mm)
	b := m.Post(1, tagB, testDesc, nil)
	readUntil(t, fr, b)
	require.Equal(t, []byte("after"), b.Data())
}

func TestInBufUnread(t *testing.T) {
	src := &vecStream{data: []byte("0123456789")}
	b := newInBuf(src, 4)
	own := b.buf
	p := make([]byte, 2)
	_, err := io.ReadFull(b, p) // buffers "0123", reads "01"
	require.NoError(t, err)
	b.unread([]byte("ab"))            // fits before the buffered "23"
	b.unread([]byte("a long prefix")) // does not fit: borrows
	rest, err := io.ReadAll(b)
	require.NoError(t, err)
	require.Equal(t, "a long prefixab23456789", string(rest))
	require.Nil(t, b.home, "the borrowed array was not given back")
	require.Same(t, &own[0], &b.buf[0], "the buffer is not its own array again")
}
