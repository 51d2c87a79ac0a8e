package fallback

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// timeoutReader fails a random share of its reads with a read deadline
// error, as a socket does when a caller reading for itself runs out of
// time (no byte is lost), and makes the others short.
type timeoutReader struct {
	r   io.Reader
	rng *rand.Rand
}

func (t *timeoutReader) Read(p []byte) (int, error) {
	if t.rng.IntN(3) == 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	if len(p) > 1 {
		p = p[:1+t.rng.IntN(len(p))]
	}
	return t.r.Read(p)
}

// readOutcome is what reading a stream did, for comparing two readings.
type readOutcome struct {
	done, failed bool
	data         string
	msgs, bytes  int
	err          string
}

// readStream reads stream to its end with a frameReader, as the reader
// goroutine does or, with rng, through a timeoutReader, resuming after
// every timeout as the next owner of a connection does.
func readStream(stream []byte, scatter bool, rng *rand.Rand) readOutcome {
	m := transport.NewMatcher(0, 0)
	var src io.Reader = bytes.NewReader(stream)
	if rng != nil {
		src = &timeoutReader{r: src, rng: rng}
	}
	size, r := 8, newInBuf(src, 4096)
	if scatter {
		size, r = 200, newInBuf(src, 64)
		r.two = readTwoFrom(src)
	}
	postedTag := transport.Tag{Comm: 1, Seq: 2}
	posted := m.Post(1, postedTag, testDesc, make([]byte, size))
	var out readOutcome
	fr := &frameReader{peer: 1, size: 2, r: r, m: m, maxMessage: 1 << 16, gate: openGate{},
		onData: func(n int) { out.msgs++; out.bytes += n }}
	var err error
	for i := 0; ; i++ {
		err = fr.readFrame(i%2 == 0) // both claims: the budget is unlimited
		if err != nil && !isTimeout(err) {
			break
		}
	}
	out.err = err.Error()
	var perr error
	out.done, perr = posted.Test()
	out.failed = perr != nil
	out.data = string(posted.Data())
	m.Abort(errors.New("done"))
	return out
}

// FuzzFrameReaderResume: a stream read with timeouts at arbitrary points,
// each followed by a resumed read, gives exactly what reading it in one go
// gives: the same messages, the same bytes, the same final error.
func FuzzFrameReaderResume(f *testing.F) {
	data := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 2}, Desc: testDesc}
	other := wire.Header{Kind: wire.Data, Tag: transport.Tag{Comm: 1, Seq: 3}, Desc: testDesc}
	f.Add(frameBytes(data, []byte("hello")), uint64(1))
	f.Add(append(frameBytes(other, make([]byte, 300)), frameBytes(data, []byte("b"))...), uint64(2))
	f.Add(append(frameBytes(wire.Header{Kind: wire.FailOp, Tag: transport.Tag{Comm: 1, Seq: 9}}, whyFailure),
		frameBytes(data, []byte("late"))...), uint64(3))
	f.Add(append(frameBytes(wire.Header{Kind: wire.Goodbye}, []byte("bye")), frameBytes(data, nil)...), uint64(4))
	f.Add(frameBytes(data, make([]byte, 150))[:100], uint64(5))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		for _, scatter := range []bool{false, true} {
			want := readStream(stream, scatter, nil)
			got := readStream(stream, scatter, rand.New(rand.NewPCG(seed, 9)))
			if got != want {
				t.Fatalf("scatter=%v: with timeouts %+v, without %+v", scatter, got, want)
			}
		}
	})
}
