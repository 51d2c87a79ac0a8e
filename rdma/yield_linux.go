//go:build linux

package rdma

import "syscall"

// yieldThread gives this thread's CPU to another runnable thread, if any
// (sched_yield; it cannot fail on Linux).
func yieldThread() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
