package fallback

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socketControl returns the hook that sets socket options before a
// connection is established: buffer sizes must be set then, since they
// fix the window scale TCP negotiates in the handshake, and
// TCP_USER_TIMEOUT bounds how long unacknowledged data may wait before the
// kernel declares the peer dead (keepalive alone does not cover a peer
// that vanishes while we are sending).
func socketControl(cfg *Config) func(network, address string, rc syscall.RawConn) error {
	return func(network, address string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			s := int(fd)
			if cfg.SocketBuffer > 0 {
				if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, cfg.SocketBuffer); serr != nil {
					return
				}
				if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.SocketBuffer); serr != nil {
					return
				}
			}
			serr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(cfg.PeerTimeout/time.Millisecond))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
