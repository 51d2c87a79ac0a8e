//go:build !linux

package main

import "os"

// maxRSS is 0 off Linux: the peak resident set size is not measured
// there (getrusage's unit differs between systems).
func maxRSS() int64 { return 0 }

// isTerminal reports whether f is a character device, as a terminal is.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
