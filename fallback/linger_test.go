package fallback

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A connection closed with the peer's data unread is reset, and the data
// this side had not yet transmitted is lost; after lingerTCP it is not:
// the peer, reading late, gets every byte and then the end of the stream.
func TestLingerDeliversBeforeReset(t *testing.T) {
	for _, linger := range []bool{false, true} {
		sent, got, err := closeWithUnreadData(t, linger)
		if !linger {
			// The reference without lingering: this setup must lose data,
			// or it would not show what lingering is for.
			require.Error(t, err, "without lingering the close must reset the connection (got %d of %d bytes)", got, sent)
			require.Less(t, got, sent)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, sent, got, "bytes the peer read")
	}
}

// closeWithUnreadData writes to a peer that starts reading only after a
// pause, until the socket buffers are full, with a byte from the peer left
// unread, closes (lingering first if asked), and returns how many bytes it
// wrote, how many the peer read, and the error that ended the peer's
// reading (nil: a clean end of stream).
func closeWithUnreadData(t *testing.T, linger bool) (int, int, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	writer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	defer writer.Close()
	reader, err := ln.AcceptTCP()
	require.NoError(t, err)
	defer reader.Close()
	require.NoError(t, reader.SetReadBuffer(64<<10))
	require.NoError(t, writer.SetWriteBuffer(64<<10))
	_, err = reader.Write([]byte{1}) // left unread: close will reset
	require.NoError(t, err)

	type result struct {
		n   int
		err error
	}
	full := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		<-full
		time.Sleep(20 * time.Millisecond) // the writer is closing by now
		_ = reader.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, reader)
		done <- result{int(n), err}
	}()
	// Write until the buffers are full: what is in this side's buffer then
	// has not been transmitted, the peer's window being shut.
	sent := 0
	chunk := make([]byte, 1<<20)
	for {
		require.NoError(t, writer.SetWriteDeadline(time.Now().Add(20*time.Millisecond)))
		n, err := writer.Write(chunk)
		sent += n
		if errors.Is(err, os.ErrDeadlineExceeded) && n == 0 && sent > 0 {
			break
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
	}
	close(full)
	if linger {
		lingerTCP(writer, time.Now().Add(5*time.Second))
	}
	require.NoError(t, writer.Close())
	select {
	case r := <-done:
		if r.err != nil && !errors.Is(r.err, syscall.ECONNRESET) {
			t.Fatalf("reading: %v", r.err)
		}
		return sent, r.n, r.err
	case <-time.After(15 * time.Second):
		t.Fatal("the reader did not finish")
		return 0, 0, nil
	}
}
