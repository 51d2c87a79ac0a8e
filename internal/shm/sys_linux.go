//go:build linux

package shm

// The system calls of the transport and its only use of unsafe: the
// shared inbox (memfd, mmap, seals), the futex on its words, reads from
// another process's memory (process_vm_readv), the peer's credentials on
// its socket, and file descriptors passed over it.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// word32 and word64 are the shared words at off in a mapping.
func word32(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
func word64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

// addrOf is the address of b's first byte, for a peer's process_vm_readv.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// createInbox makes this rank's inbox: an anonymous memfd (nothing in
// /dev/shm, freed with its last mapping) of size bytes, sealed against
// shrinking so that no peer can truncate it under a reader, and mapped.
// The caller closes fd once it has passed it to every peer.
func createInbox(name string, size int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, []byte, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return fd, mem, nil
}

// mapInbox maps a peer's inbox, received as fd, after checking that it
// has the expected size and cannot shrink (an access beyond a truncated
// file's end would be a SIGBUS). fd is closed.
func mapInbox(fd, size int) ([]byte, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("its inbox has %d bytes, expected %d", st.Size, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("get seals: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errors.New("its inbox is not sealed against shrinking")
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

func unmap(mem []byte) {
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}

// Futex operations, without FUTEX_PRIVATE_FLAG: the word is shared between
// processes.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *addr == val, until a futexWake on the word (or
// a spurious wake-up: the caller looks again).
func futexWait(addr *uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), 0, 0, 0)
}

// futexWakes counts futexWake calls, for the test that active peers make
// none.
var futexWakes atomic.Uint64

// futexWake wakes every sleeper on the word.
func futexWake(addr *uint32) {
	futexWakes.Add(1)
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// ring bumps the futex word *seq of an inbox and wakes its owner unless
// one of its goroutines is polling (*awake is not zero), in which case the
// news is seen without a system call on either side. The sequential
// consistency of the atomics makes this race-free against an owner going
// to sleep: it lowers awake, then looks at seq once more before futexWait.
func ring(seq, awake *uint32) {
	atomic.AddUint32(seq, 1)
	if atomic.LoadUint32(awake) == 0 {
		futexWake(seq)
	}
}

// pullFrom copies the payload of a single-copy message from process pid's
// buffers src into dst (process_vm_readv, which may move less than asked:
// it is called again for the rest).
func pullFrom(pid int, dst []byte, src []remoteBuf) error {
	remote := make([]unix.RemoteIovec, 0, len(src))
	for _, b := range src {
		remote = append(remote, unix.RemoteIovec{Base: uintptr(b.addr), Len: int(b.len)})
	}
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if n <= 0 {
			return fmt.Errorf("process_vm_readv moved %d of %d bytes", n, len(dst))
		}
		dst = dst[n:]
		for n > 0 {
			k := min(n, remote[0].Len)
			remote[0].Base += uintptr(k)
			remote[0].Len -= k
			n -= k
			if remote[0].Len == 0 {
				remote = remote[1:]
			}
		}
	}
	return nil
}

// allowReaders lets the peers read this process's memory where the Yama
// security module restricts ptrace to descendants (ptrace_scope 1), as
// Open MPI's single-copy path does; it changes nothing elsewhere, and an
// error only means single-copy reads may be refused, which the probe finds.
func allowReaders() error {
	return unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
}

// peerPID is the process id, in this process's pid namespace, of the
// other end of c (SO_PEERCRED); 0 when that process is not visible here.
func peerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return int(cred.Pid), nil
}

// writeWithFD writes b with fd attached (SCM_RIGHTS).
func writeWithFD(c *net.UnixConn, b []byte, fd int) error {
	n, oobn, err := c.WriteMsgUnix(b, unix.UnixRights(fd), nil)
	if err != nil {
		return err
	}
	if n != len(b) || oobn == 0 {
		return fmt.Errorf("short write with descriptor (%d of %d bytes)", n, len(b))
	}
	return nil
}

// readWithFD reads exactly len(b) bytes and the one descriptor sent with
// them. Descriptors beyond the first are closed.
func readWithFD(c *net.UnixConn, b []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	fd := -1
	got := 0
	for got < len(b) {
		n, oobn, _, _, err := c.ReadMsgUnix(b[got:], oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr == nil {
				for i := range msgs {
					fds, _ := unix.ParseUnixRights(&msgs[i])
					for _, f := range fds {
						if fd < 0 {
							fd = f
						} else {
							unix.Close(f)
						}
					}
				}
			}
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, err
		}
		if n == 0 {
			break
		}
		got += n
	}
	if got < len(b) || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		// The peer closed (or died) before a whole hello arrived.
		return -1, fmt.Errorf("short hello (%d of %d bytes, descriptor %v): %w", got, len(b), fd >= 0, io.ErrUnexpectedEOF)
	}
	return fd, nil
}

// onlineCPUs is the number of CPUs of the host (not only those this
// process may run on: ranks bound to a core each still have the others').
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return runtime.NumCPU()
		}
		n += z - a + 1
	}
	return max(n, 1)
}

// closeFD closes a descriptor this package opened.
func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
