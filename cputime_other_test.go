//go:build !unix

package sparcml

import "time"

// processCPUTime is unavailable here; the CPU-time metric is then omitted.
func processCPUTime() time.Duration { return 0 }
