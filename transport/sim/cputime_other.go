//go:build !unix

package sim

import "time"

// cpuNow stands in for the process's CPU time with wall time where
// getrusage is missing.
func cpuNow() float64 { return time.Since(start).Seconds() }

var start = time.Now()
