//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollFile wraps a dup of a completion channel's fd in an os.File so that
// waiting for it goes through Go's network poller: the goroutine parks
// without holding an OS thread or a P, and is woken by epoll. (Blocking
// in poll(2) instead keeps the P until sysmon takes it back, which can
// take milliseconds and stalls every other goroutine of a small process.)
// The dup shares the channel's open file, so readiness is the same; the
// original fd stays owned by libibverbs.
type pollFile struct {
	f  *os.File
	rc syscall.RawConn
}

func newPollFile(fd int, name string) (*pollFile, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup of completion channel fd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, err
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pollFile{f: f, rc: rc}, nil
}

func (cq *CQ) waitEvent(deadline time.Time) (bool, error) {
	if cq.ch == nil || cq.ch.pf == nil {
		return false, fmt.Errorf("%s: no completion channel", cq.name)
	}
	pf := cq.ch.pf
	if err := pf.f.SetReadDeadline(deadline); err != nil {
		return false, nil // closed by Interrupt
	}
	var got bool
	var gerr error
	err := pf.rc.Read(func(uintptr) bool {
		got, gerr = cq.GetEvent()
		return got || gerr != nil
	})
	switch {
	case gerr != nil:
		return false, gerr
	case err == nil:
		return got, nil
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, os.ErrClosed):
		return false, nil
	}
	return false, fmt.Errorf("waiting on %s: %w", cq.ch.name, err)
}

func (ch *CompChannel) interrupt() {
	if ch.pf != nil {
		ch.pf.f.Close()
	}
}
