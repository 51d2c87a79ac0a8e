//go:build !linux

package fallback

import "time"

// processCPU is not measured on this platform.
func processCPU() time.Duration { return 0 }
