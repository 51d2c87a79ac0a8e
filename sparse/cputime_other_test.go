//go:build !linux

package sparse

import "time"

// threadCPU is not measured on this platform; the cpu-ns/nnz metric then
// reads 0.
func threadCPU() time.Duration { return 0 }
