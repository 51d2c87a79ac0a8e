//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sparcml/sparcml/internal/procwatch"
)

// jobProcesses lists the live processes whose environment holds token
// (every process of one trial's job, the launcher's too, has its own).
func jobProcesses(token string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	needle := []byte("SPARCML_TOKEN=" + token + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(b, needle) && procwatch.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// leftovers names what a trial's job left: processes still alive, the
// shared-memory inboxes they map, and files in /dev/shm that were not
// there before it started.
func leftovers(token string, before map[string]bool) []string {
	var left []string
	for _, pid := range jobProcesses(token) {
		what := fmt.Sprintf("process %d", pid)
		if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil && bytes.Contains(maps, []byte("sparcml-shm")) {
			what += " mapping a shared-memory inbox"
		}
		left = append(left, what)
	}
	for name := range shmFiles() {
		if !before[name] && strings.Contains(name, "sparcml") {
			left = append(left, "/dev/shm/"+name)
			os.Remove("/dev/shm/" + name)
		}
	}
	return left
}

// killToken kills whatever is left of a trial's job.
func killToken(token string) {
	for _, pid := range jobProcesses(token) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func shmFiles() map[string]bool {
	names := map[string]bool{}
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}
