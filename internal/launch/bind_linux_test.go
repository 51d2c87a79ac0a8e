package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a rank: with LAUNCH_TEST_REPORT_CPUS
// set it prints the CPU list of every one of its threads and exits.
func TestMain(m *testing.M) {
	if os.Getenv("LAUNCH_TEST_REPORT_CPUS") == "1" {
		reportThreadCPUs()
		return
	}
	os.Exit(m.Run())
}

// reportThreadCPUs prints "tid list" for every thread of this process.
// The Go runtime has several threads by now (this is after its start-up).
func reportThreadCPUs() {
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		m := regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`).FindSubmatch(b)
		if m != nil {
			fmt.Printf("%s %s\n", filepath.Base(filepath.Dir(st)), m[1])
		}
	}
}

// TestBindCores: every thread of rank r runs on the r-th allowed CPU
// (modulo their number), one more rank than CPUs wraps around, and
// without binding the ranks keep the launcher's whole set.
func TestBindCores(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := len(cpus) + 1
	for _, bind := range []bool{true, false} {
		t.Run(fmt.Sprintf("bind=%v", bind), func(t *testing.T) {
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err := Run(ctx, Config{
				N: n, Program: self, Env: []string{"LAUNCH_TEST_REPORT_CPUS=1"},
				Stdout: &out, Stderr: &errOut, Prefix: true, BindCores: bind, Timeout: 50 * time.Second,
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut.String())
			}
			threads := map[int]int{}
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var rank int
				var tid, list string
				if _, err := fmt.Sscanf(line, "[%d] %s %s", &rank, &tid, &list); err != nil {
					t.Fatalf("unexpected line %q: %v", line, err)
				}
				want := cpuList(cpus)
				if bind {
					want = strconv.Itoa(cpus[rank%len(cpus)])
				}
				if list != want {
					t.Errorf("rank %d thread %s may run on CPUs %s, want %s", rank, tid, list, want)
				}
				threads[rank]++
			}
			for r := range n {
				if threads[r] < 2 {
					t.Errorf("rank %d reported %d threads, want the Go runtime's several", r, threads[r])
				}
			}
		})
	}
}

// cpuList formats cpus as the kernel does in Cpus_allowed_list (ranges).
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
