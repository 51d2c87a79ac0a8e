package memreg

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrMemlock is wrapped by the error CheckMemlock returns when the
// locked-memory limit is too low for the memory RDMA must pin.
var ErrMemlock = errors.New("locked-memory limit (RLIMIT_MEMLOCK) too low for RDMA")

const memlockAdvice = "raise it with `ulimit -l unlimited` in the launching shell, " +
	"a `* - memlock unlimited` line in /etc/security/limits.conf, " +
	"LimitMEMLOCK=infinity in the systemd unit, or `docker run --ulimit memlock=-1:-1`"

// Unlimited is the value MemlockLimit reports for an unlimited limit.
const Unlimited = ^uint64(0)

// MemlockLimit returns the soft and hard RLIMIT_MEMLOCK in bytes
// (Unlimited for no limit).
func MemlockLimit() (soft, hard uint64, err error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		return 0, 0, fmt.Errorf("memreg: getrlimit(RLIMIT_MEMLOCK): %w", err)
	}
	return conv(uint64(r.Cur)), conv(uint64(r.Max)), nil
}

func conv(v uint64) uint64 {
	if v == uint64(unix.RLIM_INFINITY) {
		return Unlimited
	}
	return v
}

// CheckMemlock returns an error wrapping ErrMemlock when need bytes cannot
// be pinned under the current soft limit. Processes with CAP_IPC_LOCK
// (root, usually) are not bound by the limit for registrations, so the
// check passes for them.
func CheckMemlock(need uint64) error {
	soft, hard, err := MemlockLimit()
	if err != nil {
		return err
	}
	return checkMemlock(need, soft, hard, os.Geteuid() == 0)
}

func checkMemlock(need, soft, hard uint64, privileged bool) error {
	if soft == Unlimited || need <= soft || privileged {
		return nil
	}
	return fmt.Errorf("%w: need %s, soft limit %s, hard limit %s; %s",
		ErrMemlock, human(need), human(soft), human(hard), memlockAdvice)
}

func human(v uint64) string {
	switch {
	case v == Unlimited:
		return "unlimited"
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", v>>10)
	}
	return fmt.Sprintf("%d bytes", v)
}
