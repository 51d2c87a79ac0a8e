package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	sparcmlBin  string // the CLI under test (SPARCML_BIN, or built here)
	testprogBin string // the rank program of test/testprog
	buildDir    string
	buildOnce   sync.Once
	buildErr    error

	sharedOnce sync.Once
	sharedC    *Cluster
	sharedErr  error
)

// The shared cluster of the multi-host tests: 4 hosts whose network 0 (the
// data network) runs at 1 Gbit/s, plus a slower network 1 for the tests of
// interface choice. Its self-check is advisory: these tests check
// behaviour, and TestShapingBothDirections holds the links to their rate.
const (
	sharedHosts = 4
	sharedRate  = "1gbit"
	mgmtRate    = "100mbit"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("SPARCML_CLUSTER_UDP"); mode != "" {
		os.Exit(udpTool(mode, os.Getenv("SPARCML_CLUSTER_UDP_ADDR")))
	}
	code := m.Run()
	if sharedC != nil {
		if err := sharedC.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// shared returns the cluster the multi-host tests share (made once, its
// self-check passed), skipping the test where clusters cannot be made.
func shared(t *testing.T) *Cluster {
	t.Helper()
	if err := Unavailable(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	sharedOnce.Do(func() {
		sharedC, sharedErr = Up(Options{Hosts: sharedHosts, Rates: []string{sharedRate, mgmtRate}, ProbeAdvisory: true})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	t.Logf("cluster %s: %d hosts at %s, probe host 0 -> 1: %.1f Mbit/s", sharedC.ID, sharedHosts, sharedRate, sharedC.ProbeMbps)
	if sharedC.ProbeErr != nil {
		t.Logf("warning: the links run below their rate (a busy CPU?): %v", sharedC.ProbeErr)
	}
	return sharedC
}

// binaries builds (once) the CLI and the rank program the multi-host tests
// run, unless SPARCML_BIN names a built CLI.
func binaries(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sparcml-cluster-")
		if buildErr != nil {
			return
		}
		sparcmlBin = os.Getenv("SPARCML_BIN")
		if sparcmlBin == "" {
			sparcmlBin = filepath.Join(buildDir, "sparcml")
			if buildErr = goBuild(sparcmlBin, "../../cmd/sparcml"); buildErr != nil {
				return
			}
		}
		testprogBin = filepath.Join(buildDir, "testprog")
		buildErr = goBuild(testprogBin, "../testprog")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func goBuild(out, pkg string) error {
	args := []string{"build", "-o", out}
	if tags := os.Getenv("TAGS"); tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
