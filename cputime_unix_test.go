//go:build unix

package sparcml

import (
	"syscall"
	"time"
)

// processCPUTime returns the user+system CPU time the process has used.
// Benchmarks report throughput per CPU second too, because on a shared
// machine wall-clock time includes waiting for a core.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
