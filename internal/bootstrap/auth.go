package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// ErrAuth: the other side of a connection does not know the job secret.
var ErrAuth = errors.New("authentication failed")

const nonceSize = 32

// Authenticate runs a mutual HMAC-SHA256 challenge-response over conn with
// the job secret token, so neither side learns anything from a stranger
// and a stranger can neither join nor inject data. The dialing side passes
// client=true. Each side sends a fresh nonce; the client proves itself
// first, then the server; the role label in the MAC stops a reflected
// proof. The deadline bounds the whole exchange.
func Authenticate(conn net.Conn, token []byte, client bool, deadline time.Time) error {
	if len(token) == 0 {
		return fmt.Errorf("%w: empty job token", ErrAuth)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	defer conn.SetDeadline(time.Time{})

	mine := make([]byte, nonceSize)
	if _, err := rand.Read(mine); err != nil {
		return err
	}
	if _, err := conn.Write(mine); err != nil {
		return fmt.Errorf("auth: send nonce: %w", err)
	}
	theirs := make([]byte, nonceSize)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return fmt.Errorf("auth: read nonce: %w", err)
	}
	cn, sn := mine, theirs
	if !client {
		cn, sn = theirs, mine
	}
	clientProof := proof(token, "sparcml-auth-v1 client", cn, sn)
	serverProof := proof(token, "sparcml-auth-v1 server", cn, sn)

	send, want := clientProof, serverProof
	if !client {
		send, want = serverProof, clientProof
	}
	got := make([]byte, sha256.Size)
	if client {
		if _, err := conn.Write(send); err != nil {
			return fmt.Errorf("auth: send proof: %w", err)
		}
		if _, err := io.ReadFull(conn, got); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Silence is not a refusal: on a lossy link the
				// retransmissions can outlast the deadline.
				return fmt.Errorf("auth: no proof from the server before the handshake deadline: %w", err)
			}
			if errors.Is(err, syscall.ECONNRESET) {
				// A refusal closes after reading the proof (EOF); a
				// reset is the server's process ending mid-handshake
				// (the kill soak, test/soak, found it read as a wrong
				// token), which a retry may diagnose as such.
				return fmt.Errorf("auth: the server's end reset the connection before its proof (its process ended?): %w", err)
			}
			return fmt.Errorf("%w: server closed the connection (wrong token?): %w", ErrAuth, err)
		}
		if !hmac.Equal(got, want) {
			return fmt.Errorf("%w: server's proof does not match the job token", ErrAuth)
		}
		return nil
	}
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("auth: read proof: %w", err)
	}
	if !hmac.Equal(got, want) {
		return fmt.Errorf("%w: client %v does not know the job token", ErrAuth, conn.RemoteAddr())
	}
	if _, err := conn.Write(send); err != nil {
		return fmt.Errorf("auth: send proof: %w", err)
	}
	return nil
}

func proof(token []byte, label string, clientNonce, serverNonce []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(clientNonce)
	m.Write(serverNonce)
	return m.Sum(nil)
}
