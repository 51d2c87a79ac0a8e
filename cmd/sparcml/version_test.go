package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A binary built with -ldflags -X internal/version.Version (as the
// Makefile builds it) reports that version in `sparcml version` and in the
// library's start-up line, which rank 0 logs at the default level.
func TestBuildVersionInBothPlaces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	const want = "v0.0.0-versiontest-1-gabcdef0"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "sparcml")
	// Without verbs: the version does not depend on them, and the test
	// then builds where the verbs headers are missing too.
	build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", "sparcml_noverbs",
		"-ldflags", "-X github.com/sparcml/sparcml/internal/version.Version="+want, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sparcml version: %v\n%s", err, out)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != "sparcml "+want {
		t.Errorf("sparcml version says %q, want %q", first, "sparcml "+want)
	}
	job := exec.CommandContext(ctx, bin, "bench", "-n", "2", "--op", "allreduce", "--sizes", "1K", "--iters", "1", "--warmup", "0")
	job.Env = withoutSparcmlVars(os.Environ())
	out, err = job.CombinedOutput()
	if err != nil {
		t.Fatalf("sparcml bench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "[0] sparcml version "+want+": 2 ranks") {
		t.Errorf("no start-up line with version %s:\n%s", want, out)
	}
}

// withoutSparcmlVars drops SPARCML_* from env, so the default log level
// holds whatever the environment of the test says.
func withoutSparcmlVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SPARCML_") {
			out = append(out, kv)
		}
	}
	return out
}
