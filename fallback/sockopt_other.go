//go:build !linux

package fallback

import "syscall"

// socketControl sets nothing before connecting on this platform; tuneConn
// sets the buffer sizes once connected.
func socketControl(cfg *Config) func(network, address string, rc syscall.RawConn) error {
	return nil
}
