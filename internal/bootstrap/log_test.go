package bootstrap

import (
	"net"
	"testing"
	"time"
)

// A flood of strangers costs one "refused connection" warning per
// interval, and the next one says how many were held back.
func TestRefusedConnectionsRateLimited(t *testing.T) {
	var logs logBuffer
	s, addr := testServer(t, 2, "right", &logs)
	s.refusals.Every = 300 * time.Millisecond
	const strangers = 20
	for i := 0; i < strangers; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // not the store's protocol
		c.Close()
	}
	waitFor(t, 5*time.Second, "the first refusal", func() bool { return logs.count("refused connection") == 1 })
	time.Sleep(400 * time.Millisecond) // every stranger has been handled by now, one interval has passed
	if n := logs.count("refused connection"); n != 1 {
		t.Fatalf("%d refusal lines within one interval, want 1:\n%s", n, logs.String())
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.Close()
	waitFor(t, 5*time.Second, "the second refusal", func() bool { return logs.count("refused connection") == 2 })
	if !logs.contains("more like it since the last one shown") {
		t.Errorf("the second refusal does not count the ones held back:\n%s", logs.String())
	}
}

// Stopping the store while a connection is still in its handshake is the
// store closing: no "refused connection ... use of closed network
// connection" warning.
func TestStopDuringHandshakeIsQuiet(t *testing.T) {
	var logs logBuffer
	s, addr := testServer(t, 2, "right", &logs)
	c, err := net.Dial("tcp", addr) // says nothing: the handshake waits
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 5*time.Second, "the handshake to start", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.open) == 1
	})
	s.stop()
	if logs.contains("refused") || logs.contains("closed network connection") {
		t.Errorf("stopping the store logged:\n%s", logs.String())
	}
}
