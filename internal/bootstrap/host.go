package bootstrap

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// HostKey identifies the machine and network namespace this process runs
// in: Linux's boot_id (new at every boot, unique per machine and shared by
// the containers on it) and the inode of the network namespace, so that
// the emulated hosts of test/cluster, which share one kernel, differ, and
// ranks that could share memory and a loopback address have equal keys.
// Where /proc does not say (systems other than Linux) it falls back to the
// host name.
func HostKey() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		name, _ := os.Hostname()
		return "host:" + name
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		ns = "net:?"
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
}

// hostKeyPrefix prefixes the store keys of ExchangeHosts.
const hostKeyPrefix = "host/key/"

// ExchangeHosts publishes key, this rank's HostKey, through the store and
// learns every rank's: it returns, for each rank of the job, the index of
// its host, hosts numbered in the order of their lowest rank (rank 0's
// host is 0). Every rank gets the same answer.
func ExchangeHosts(ctx context.Context, store Store, rank, size int, key string) ([]int, error) {
	if size == 1 {
		return []int{0}, nil
	}
	if err := store.Set(ctx, fmt.Sprintf("%s%d", hostKeyPrefix, rank), []byte(key)); err != nil {
		return nil, fmt.Errorf("publish host identity: %w", err)
	}
	keys := make([]string, size)
	for r := range size {
		v, err := store.Get(ctx, fmt.Sprintf("%s%d", hostKeyPrefix, r))
		if err != nil {
			return nil, fmt.Errorf("learn rank %d's host identity: %w", r, err)
		}
		keys[r] = string(v)
	}
	return HostIndices(keys), nil
}

// HostIndices numbers distinct keys in the order they first appear:
// HostIndices([a b a c]) is [0 1 0 2].
func HostIndices(keys []string) []int {
	index := make(map[string]int)
	out := make([]int, len(keys))
	for r, k := range keys {
		i, ok := index[k]
		if !ok {
			i = len(index)
			index[k] = i
		}
		out[r] = i
	}
	return out
}
