//go:build !linux

package compress

import "time"

// threadCPU is not measured on this platform; the cpu-MB/s metric is
// then left out.
func threadCPU() time.Duration { return 0 }
