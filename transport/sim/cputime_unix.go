//go:build unix

package sim

import "syscall"

// cpuNow is the CPU time this process has used, user and system, in
// seconds: what ComputeMeasured charges, since one goroutine of the job
// runs at a time. CPU time, not wall time, so that other processes on the
// machine do not inflate it.
func cpuNow() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0 // never on Linux; a goroutine is then charged nothing
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)*1e-6 }
