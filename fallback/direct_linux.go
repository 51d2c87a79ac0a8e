package fallback

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// writeNow writes iov to the socket with one non-blocking writev and
// returns how many bytes the kernel took. A full socket buffer is not an
// error: the writer goroutine finishes the frame. It is called only by
// the socket's current owner (see sendQueue), so the conn's direct-write
// fields are its own.
func (c *conn) writeNow(iov [][]byte) (int, error) {
	if c.rc == nil {
		return 0, nil
	}
	if c.dwrite == nil {
		// Made once: a closure per call would allocate per message.
		c.dwrite = c.writevOnce
	}
	c.dvec, c.dn, c.derr = iov, 0, nil
	// The callback runs with the descriptor's write lock held, so the
	// descriptor cannot be closed and reused under us.
	err := c.rc.Write(c.dwrite)
	n, werr := c.dn, c.derr
	c.dvec, c.derr = nil, nil
	if err != nil {
		return 0, err // the connection is closed, or its deadline passed
	}
	return n, werr
}

// writevOnce is writeNow's callback. It returns true, "do not wait for the
// socket to become writable", whatever happened.
func (c *conn) writevOnce(fd uintptr) bool {
	for {
		n, err := unix.Writev(int(fd), c.dvec)
		switch {
		case err == nil:
			c.dn = n
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			// Socket buffer full: nothing written.
		default:
			c.derr = err
		}
		return true
	}
}

// readTwo is the socket's inBuf.two: one readv into a and then b,
// waiting for the socket to become readable if nothing is queued. Only the
// connection's reader calls it, so the conn's read fields are its own.
func (c *conn) readTwo(a, b []byte) (int, error) {
	c.rvec[0], c.rvec[1] = a, b
	if c.rread == nil {
		c.rread = c.readvOnce // made once, like writeNow's callback
	}
	c.rn, c.rerr = 0, nil
	err := c.rc.Read(c.rread)
	n, rerr := c.rn, c.rerr
	clear(c.rvec[:])
	c.rerr = nil
	switch {
	case err != nil: // closed, or a deadline passed
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: os.NewSyscallError("readv", rerr)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readvOnce is readTwo's callback. It returns false, "wait until the
// socket is readable and call again", only when nothing is queued.
func (c *conn) readvOnce(fd uintptr) bool {
	for {
		n, err := unix.Readv(int(fd), c.rvec[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return false
		}
		c.rn, c.rerr = n, err
		return true
	}
}

// setLowat sets SO_RCVLOWAT, best effort: without it the reader only
// wakes more often. Only the connection's reader calls it.
func (c *conn) setLowat(n int) {
	if c.lowatSet == nil {
		c.lowatSet = c.setLowatOnce // made once, like writeNow's callback
	}
	c.lowatN = n
	_ = c.rc.Control(c.lowatSet)
}

func (c *conn) setLowatOnce(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, c.lowatN)
}

// lowatSafe: the kernel wakes a TCP reader before its low-water mark is
// reached when the receive window or memory runs out (Linux 5.8, "tcp: fix
// SO_RCVLOWAT hangs with fat skbs"), and grows the receive buffer to hold
// the mark (4.18). On older kernels a mark the window cannot admit could
// leave the reader asleep for good, so they do without.
var lowatSafe = kernelAtLeast(5, 8)

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	maj, mi, ok := parseKernelRelease(unix.ByteSliceToString(u.Release[:]))
	return ok && (maj > major || maj == major && mi >= minor)
}

// parseKernelRelease reads "6.1.0-18-amd64" as 6, 1.
func parseKernelRelease(rel string) (major, minor int, ok bool) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	end := 0
	for end < len(parts[1]) && parts[1][end] >= '0' && parts[1][end] <= '9' {
		end++
	}
	minor, err2 := strconv.Atoi(parts[1][:end])
	return major, minor, err1 == nil && err2 == nil
}

// scatterReads: the reader ends a payload with a readv that also fetches
// what follows it (see inBuf).
const scatterReads = true
