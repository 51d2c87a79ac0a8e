//go:build !linux

package launch

import (
	"errors"
	"os/exec"
)

var errNoBinding = errors.New("launch: binding ranks to CPUs is supported on Linux only")

func allowedCPUs() ([]int, error) { return nil, errNoBinding }

func startBound(cmds []*exec.Cmd, cpus []int) (int, error) { return 0, errNoBinding }
