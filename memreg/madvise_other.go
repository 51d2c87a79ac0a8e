//go:build !linux

package memreg

func dontFork([]byte) {}
