package launch

import (
	"slices"
	"strings"
	"testing"
)

// envValue returns the last value of key in env, as exec gives a child.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

func TestJobEnvTorchrunVariables(t *testing.T) {
	env, err := jobEnv(Config{N: 4, Env: []string{"EXTRA=1"}})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"SPARCML_SIZE": "4", "SPARCML_LOCAL_SIZE": "4", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "127.0.0.1", "EXTRA": "1",
	} {
		if got := envValue(env, key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	store := strings.TrimPrefix(envValue(env, "SPARCML_ADDR"), "127.0.0.1:")
	master := envValue(env, "MASTER_PORT")
	if store == "" || master == "" || store == master {
		t.Errorf("SPARCML_ADDR port %q and MASTER_PORT %q must both be set and differ", store, master)
	}
	if envValue(env, "SPARCML_TOKEN") == "" {
		t.Error("no SPARCML_TOKEN")
	}
	r := rankEnv(2)
	for _, want := range []string{"SPARCML_RANK=2", "SPARCML_LOCAL_RANK=2", "RANK=2", "LOCAL_RANK=2"} {
		if !slices.Contains(r, want) {
			t.Errorf("rank env %v lacks %s", r, want)
		}
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	s := slices.Clone(ports)
	slices.Sort(s)
	if len(slices.Compact(s)) != len(ports) {
		t.Errorf("repeated ports: %v", ports)
	}
}
