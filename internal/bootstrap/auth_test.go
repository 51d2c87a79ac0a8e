package bootstrap

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client whose server goes silent after the nonces (a lossy link whose
// retransmissions outlast the deadline) gets a timeout it may retry, not
// ErrAuth; one whose server closes after the client's proof (a wrong
// token) gets ErrAuth; one whose server's process ends before its proof
// (the kernel resets the connection) gets an error it may retry, not
// ErrAuth: rank 0 died, the token is not wrong. The servers are the real
// server side of Authenticate up to its read of the client's proof.
func TestAuthenticateTimeoutIsNotRefusal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		serverGo func(net.Conn) // after reading the nonce and the proof
		wantAuth bool
	}{
		{"silent server", func(c net.Conn) { time.Sleep(2 * time.Second); c.Close() }, false},
		{"closing server", func(c net.Conn) { c.Close() }, true},
		{"dying server", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			go func() {
				// The server's half of the exchange, minus its proof.
				nonce := make([]byte, nonceSize)
				if _, err := server.Write(nonce); err != nil {
					return
				}
				buf := make([]byte, nonceSize+32)
				if _, err := io.ReadFull(server, buf); err != nil {
					return
				}
				tc.serverGo(server)
			}()
			err := Authenticate(client, []byte("token"), true, time.Now().Add(300*time.Millisecond))
			require.Error(t, err)
			assert.Equal(t, tc.wantAuth, errors.Is(err, ErrAuth), "%v", err)
		})
	}
}

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
