package launch

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs lists the CPUs this process may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("launch: reading the CPU affinity (sched_getaffinity): %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startBound starts cmds in order, command i bound to cpus[i%len(cpus)]
// from its first instruction: a thread's CPU mask is inherited by the
// processes it forks, so the commands are started from one locked thread
// whose mask is set before each start. Binding the process after it
// started would miss the threads its runtime had already made. It returns
// how many commands started.
func startBound(cmds []*exec.Cmd, cpus []int) (int, error) {
	type result struct {
		started int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine rather
		// than going back to the scheduler with the last rank's mask.
		runtime.LockOSThread()
		for i, cmd := range cmds {
			cpu := cpus[i%len(cpus)]
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				done <- result{i, fmt.Errorf("launch: binding rank %d to CPU %d (sched_setaffinity): %w", i, cpu, err)}
				return
			}
			if err := cmd.Start(); err != nil {
				done <- result{i, fmt.Errorf("launch: start rank %d: %w", i, err)}
				return
			}
		}
		done <- result{len(cmds), nil}
	}()
	r := <-done
	return r.started, r.err
}
