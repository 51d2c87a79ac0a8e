package fallback

import (
	"fmt"
	"net"
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
			if namesAlgorithm(cfg.Congestion) {
				// Set on the listener too, so that an algorithm the
				// kernel lacks fails every rank at once.
				if serr = unix.SetsockoptString(s, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cfg.Congestion); serr != nil {
					serr = fmt.Errorf("congestion control %q (SPARCML_TCP_CONGESTION): set TCP_CONGESTION: %w", cfg.Congestion, serr)
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

// setCongestion applies policy (Config.Congestion) to an established
// connection and returns the algorithm it found and the one it switched
// to, "" if it kept the kernel's.
func setCongestion(nc *net.TCPConn, policy string) (from, to string, err error) {
	rc, err := nc.SyscallConn()
	if err != nil {
		return "", "", err
	}
	local := sameHost(nc.LocalAddr(), nc.RemoteAddr())
	var serr error
	err = rc.Control(func(fd uintptr) {
		s := int(fd)
		if from, serr = unix.GetsockoptString(s, unix.IPPROTO_TCP, unix.TCP_CONGESTION); serr != nil {
			serr = fmt.Errorf("get TCP_CONGESTION: %w", serr)
			return
		}
		try, strict := congestionChoices(policy, from, local)
		for _, algo := range try {
			if serr = unix.SetsockoptString(s, unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo); serr == nil {
				to = algo
				return
			}
			serr = fmt.Errorf("set TCP_CONGESTION %q: %w", algo, serr)
		}
		if !strict {
			serr = nil // best effort: keep the kernel's choice
		}
	})
	if err != nil {
		return "", "", err
	}
	return from, to, serr
}

// unackedBytes is how many bytes written to nc the peer has not yet
// acknowledged (SIOCOUTQ: sent but unacknowledged, plus not yet sent), 0
// once the connection is closed (reset by the peer: nothing more will be).
func unackedBytes(nc *net.TCPConn) (int, error) {
	rc, err := nc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	err = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			ierr = err
			return
		}
		if info.State == tcpClose {
			return
		}
		n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	})
	if err != nil {
		return 0, err
	}
	return n, ierr
}

// tcpClose is TCP_CLOSE in tcp_info's state (linux/tcp_states.h).
const tcpClose = 7
