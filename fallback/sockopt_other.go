//go:build !linux

package fallback

import (
	"fmt"
	"net"
	"syscall"
)

// socketControl sets nothing before connecting on this platform; tuneConn
// sets the buffer sizes once connected.
func socketControl(cfg *Config) func(network, address string, rc syscall.RawConn) error {
	return nil
}

// setCongestion keeps the system's congestion control on this platform;
// naming an algorithm is an error.
func setCongestion(nc *net.TCPConn, policy string) (from, to string, err error) {
	if namesAlgorithm(policy) {
		return "", "", fmt.Errorf("choosing the TCP congestion control (%q) is supported on Linux only", policy)
	}
	return "", "", nil
}

// unackedBytes reports nothing outstanding on this platform, where Close
// shuts down writing and closes without waiting for acknowledgements.
func unackedBytes(nc *net.TCPConn) (int, error) { return 0, nil }
