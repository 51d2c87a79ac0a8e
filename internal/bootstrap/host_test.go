package bootstrap

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHostIndices(t *testing.T) {
	got := HostIndices([]string{"b", "a", "b", "c", "a"})
	if want := []int{0, 1, 0, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("HostIndices = %v, want %v", got, want)
	}
}

// Two processes of one namespace have one key; a process in a new network
// namespace (unshare -n, as root) another.
func TestHostKey(t *testing.T) {
	k := HostKey()
	if runtime.GOOS == "linux" && !strings.Contains(k, "net:[") {
		t.Fatalf("HostKey %q names no network namespace", k)
	}
	if os.Getenv("BOOTSTRAP_PRINT_HOST_KEY") == "1" {
		os.Stdout.WriteString("KEY=" + k + "\n")
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := func(prefix ...string) (string, error) {
		args := append(prefix, self, "-test.run=^TestHostKey$")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "BOOTSTRAP_PRINT_HOST_KEY=1")
		out, err := cmd.Output()
		for _, line := range strings.Split(string(out), "\n") {
			if key, ok := strings.CutPrefix(line, "KEY="); ok {
				return key, nil
			}
		}
		return "", err
	}
	same, err := child()
	if err != nil || same != k {
		t.Fatalf("another process here: key %q (%v), want %q", same, err, k)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the other-namespace case is skipped")
		return
	}
	other, err := child("unshare", "-n")
	if err != nil || other == "" {
		t.Skipf("unshare -n: %v", err)
	}
	if other == k {
		t.Fatalf("a process in a new network namespace has this one's key %q", k)
	}
}

// Every rank learns the same host indices from the keys they publish.
func TestExchangeHosts(t *testing.T) {
	keys := []string{"x", "y", "x", "y", "z"}
	store := NewMemStore()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make([][]int, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for r := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r], errs[r] = ExchangeHosts(ctx, store, r, len(keys), keys[r])
		}()
	}
	wg.Wait()
	for r := range keys {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if want := []int{0, 1, 0, 1, 2}; !slices.Equal(got[r], want) {
			t.Fatalf("rank %d: hosts %v, want %v", r, got[r], want)
		}
	}
}
