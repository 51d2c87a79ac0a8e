package bootstrap

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"
)

// defaultTimeout stands for the configuration table's default of
// SPARCML_TIMEOUT, which bootstrap passes on.
const defaultTimeout = 5 * time.Minute

// fromVars runs FromEnv on a set of variables as the public API would:
// the SPARCML_* ones become Settings (parsed here as the configuration
// table parses them), the others are read through getenv, which fails the
// test if bootstrap asks it for a SPARCML_* name.
func fromVars(t *testing.T, vars map[string]string) (Env, error) {
	t.Helper()
	own := Settings{Rank: -1, Size: -1, Timeout: defaultTimeout}
	count := func(name string) int {
		v, ok := vars[name]
		if !ok {
			return -1
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			t.Fatalf("test data: %s=%q", name, v)
		}
		return n
	}
	own.Rank, own.Size = count("SPARCML_RANK"), count("SPARCML_SIZE")
	if p := count("SPARCML_PORT"); p > 0 {
		own.Port = p
	}
	own.Addr, own.Token, own.IfName = vars["SPARCML_ADDR"], vars["SPARCML_TOKEN"], vars["SPARCML_IFNAME"]
	if v, ok := vars["SPARCML_TIMEOUT"]; ok {
		d, err := time.ParseDuration(v)
		if secs, ferr := strconv.ParseFloat(v, 64); ferr == nil {
			d, err = time.Duration(secs*float64(time.Second)), nil
		}
		if v == "none" {
			d, err = 0, nil
		}
		if err != nil {
			t.Fatalf("test data: SPARCML_TIMEOUT=%q", v)
		}
		own.Timeout = d
	}
	getenv := func(name string) string {
		if strings.HasPrefix(name, "SPARCML_") {
			t.Errorf("bootstrap read %s from the environment; sparcml's own variables come in Settings", name)
		}
		return vars[name]
	}
	return FromEnv(own, getenv)
}

func TestFromEnvLaunchers(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want Env
	}{
		{
			name: "sparcml",
			vars: map[string]string{
				"SPARCML_RANK": "2", "SPARCML_SIZE": "4", "SPARCML_ADDR": "10.0.0.1:29500",
				"SPARCML_TOKEN": "s3cret", "SPARCML_IFNAME": "ib0", "SPARCML_TIMEOUT": "90s",
			},
			want: Env{Rank: 2, Size: 4, Addr: "10.0.0.1:29500", Token: []byte("s3cret"), TokenSource: "SPARCML_TOKEN",
				IfName: "ib0", Timeout: 90 * time.Second, Launcher: "sparcml", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "sparcml wins over torchrun and slurm",
			vars: map[string]string{
				"SPARCML_RANK": "0", "SPARCML_SIZE": "1", "SPARCML_ADDR": "h:1", "SPARCML_TOKEN": "t",
				"RANK": "5", "WORLD_SIZE": "8", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
			},
			want: Env{Rank: 0, Size: 1, Addr: "h:1", Token: []byte("t"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "sparcml", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "torchrun with token",
			vars: map[string]string{
				"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "node1", "MASTER_PORT": "29400",
				"SPARCML_TOKEN": "tok", "SPARCML_TIMEOUT": "none",
			},
			want: Env{Rank: 3, Size: 8, Addr: "node1:29400", Token: []byte("tok"), TokenSource: "SPARCML_TOKEN",
				Timeout: 0, Launcher: "torchrun", AddrSource: "MASTER_ADDR:MASTER_PORT"},
		},
		{
			name: "torchrun derived token, IPv6 master",
			vars: map[string]string{
				"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "abc",
			},
			want: Env{Rank: 0, Size: 2, Addr: "[fd00::1]:29400", Token: []byte("torchrun:fd00::1:29400:abc"),
				TokenSource: "derived from MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID (not secret; set SPARCML_TOKEN)",
				Timeout:     defaultTimeout, Launcher: "torchrun", AddrSource: "MASTER_ADDR:MASTER_PORT"},
		},
		{
			name: "torchrun agent store owns MASTER_PORT",
			vars: map[string]string{
				"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29400",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "SPARCML_TOKEN": "tok",
			},
			want: Env{Rank: 1, Size: 2, Addr: "node1:29401", Token: []byte("tok"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "torchrun",
				AddrSource: "MASTER_ADDR:MASTER_PORT+1 (torchrun's agent store uses MASTER_PORT)"},
		},
		{
			name: "torchrun SPARCML_PORT",
			vars: map[string]string{
				"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29400",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "SPARCML_PORT": "31000", "SPARCML_TOKEN": "tok",
			},
			want: Env{Rank: 1, Size: 2, Addr: "node1:31000", Token: []byte("tok"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "torchrun", AddrSource: "MASTER_ADDR:SPARCML_PORT"},
		},
		{
			name: "torchrun SPARCML_ADDR overrides",
			vars: map[string]string{
				"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29400",
				"SPARCML_ADDR": "10.1.1.1:5000", "SPARCML_TOKEN": "tok", "SPARCML_TIMEOUT": "90",
			},
			want: Env{Rank: 1, Size: 2, Addr: "10.1.1.1:5000", Token: []byte("tok"), TokenSource: "SPARCML_TOKEN",
				Timeout: 90 * time.Second, Launcher: "torchrun", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "mpirun wins over the slurm variables of its daemons",
			vars: map[string]string{
				"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "SPARCML_ADDR": "n1:7000",
				"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SPARCML_TOKEN": "x",
			},
			want: Env{Rank: 5, Size: 16, Addr: "n1:7000", Token: []byte("x"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "mpirun", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "mpirun derived token",
			vars: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "SPARCML_ADDR": "n1:7000"},
			want: Env{Rank: 0, Size: 2, Addr: "n1:7000", Token: []byte("mpirun:n1:7000"),
				TokenSource: "derived from SPARCML_ADDR (not secret; pass `-x SPARCML_TOKEN=...`)",
				Timeout:     defaultTimeout, Launcher: "mpirun", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "MPICH hydra PMI variables",
			vars: map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "SPARCML_ADDR": "n1:7000", "SPARCML_TOKEN": "x"},
			want: Env{Rank: 1, Size: 3, Addr: "n1:7000", Token: []byte("x"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "mpirun", AddrSource: "SPARCML_ADDR"},
		},
		{
			name: "srun with bracketed step node list",
			vars: map[string]string{
				"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "2",
				"SLURM_STEP_NODELIST": "node[03-05,7],gpu1", "SLURM_JOB_NODELIST": "other[1-9]",
			},
			want: Env{Rank: 7, Size: 8, Addr: "node03:29956", Token: []byte("srun:123456.2"),
				TokenSource: "derived from SLURM_JOB_ID and SLURM_STEP_ID (not secret; set SPARCML_TOKEN)",
				Timeout:     defaultTimeout, Launcher: "srun",
				AddrSource: "first node of SLURM_STEP_NODELIST, port 29500+SLURM_JOB_ID%1000"},
		},
		{
			name: "srun job node list, SPARCML_PORT, SLURM_NPROCS",
			vars: map[string]string{
				"SLURM_PROCID": "0", "SLURM_NPROCS": "2", "SLURM_JOB_ID": "42",
				"SLURM_JOB_NODELIST": "cn001", "SPARCML_PORT": "6000", "SPARCML_TOKEN": "tok", "SPARCML_TIMEOUT": "1.5",
			},
			want: Env{Rank: 0, Size: 2, Addr: "cn001:6000", Token: []byte("tok"), TokenSource: "SPARCML_TOKEN",
				Timeout: 1500 * time.Millisecond, Launcher: "srun", AddrSource: "first node of SLURM_JOB_NODELIST, port SPARCML_PORT"},
		},
		{
			name: "launcher values are trimmed",
			vars: map[string]string{"RANK": " 1 ", "WORLD_SIZE": "2\n", "MASTER_ADDR": " h", "MASTER_PORT": "1 ", "SPARCML_TOKEN": "t"},
			want: Env{Rank: 1, Size: 2, Addr: "h:1", Token: []byte("t"), TokenSource: "SPARCML_TOKEN",
				Timeout: defaultTimeout, Launcher: "torchrun", AddrSource: "MASTER_ADDR:MASTER_PORT"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromVars(t, tc.vars)
			if err != nil {
				t.Fatal(err)
			}
			if !envEqual(got, tc.want) {
				t.Errorf("got  %+v (token %q)\nwant %+v (token %q)", got, got.Token, tc.want, tc.want.Token)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	sparcml := func(extra map[string]string) map[string]string {
		m := map[string]string{"SPARCML_RANK": "1", "SPARCML_SIZE": "4", "SPARCML_ADDR": "h:29500", "SPARCML_TOKEN": "t"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name string
		vars map[string]string
		want []string // substrings of the error
	}{
		{"nothing set", map[string]string{},
			[]string{"no launcher environment", "SPARCML_RANK/SPARCML_SIZE", "RANK/WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID/SLURM_NTASKS"}},
		{"rank only", map[string]string{"SPARCML_RANK": "1"}, []string{"SPARCML_RANK is set but SPARCML_SIZE is not"}},
		{"size only torchrun", map[string]string{"WORLD_SIZE": "2"}, []string{"WORLD_SIZE is set but RANK is not"}},
		{"rank equals size", sparcml(map[string]string{"SPARCML_RANK": "4"}), []string{"SPARCML_RANK=4", "SPARCML_SIZE=4"}},
		{"size zero", sparcml(map[string]string{"SPARCML_RANK": "0", "SPARCML_SIZE": "0"}), []string{"SPARCML_SIZE=0", "at least 1"}},
		{"huge size", sparcml(map[string]string{"SPARCML_SIZE": "99999999999"}), []string{"SPARCML_SIZE=99999999999", "maximum"}},
		{"sparcml without addr", without(sparcml(nil), "SPARCML_ADDR"), []string{"SPARCML_ADDR"}},
		{"sparcml without token", without(sparcml(nil), "SPARCML_TOKEN"), []string{"SPARCML_TOKEN is not set"}},
		{"addr without port", sparcml(map[string]string{"SPARCML_ADDR": "host"}), []string{`"host"`, "SPARCML_ADDR", "host:port"}},
		{"addr bad port", sparcml(map[string]string{"SPARCML_ADDR": "host:http"}), []string{"SPARCML_ADDR", `port "http"`}},
		{"addr port zero", sparcml(map[string]string{"SPARCML_ADDR": "host:0"}), []string{"SPARCML_ADDR", `port "0"`}},
		{"addr no host", sparcml(map[string]string{"SPARCML_ADDR": ":29500"}), []string{"SPARCML_ADDR", "no host"}},
		{"torchrun without master", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, []string{"MASTER_ADDR", "SPARCML_ADDR"}},
		{"torchrun bad master port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "x"},
			[]string{"MASTER_ADDR:MASTER_PORT", `port "x"`}},
		{"torchrun agent store bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "x",
			"TORCHELASTIC_USE_AGENT_STORE": "True"}, []string{`MASTER_PORT="x"`}},
		{"mpirun without addr", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
			[]string{"-x SPARCML_ADDR=host:port"}},
		{"srun without node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1"},
			[]string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}},
		{"srun bad node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"},
			[]string{"SLURM_JOB_NODELIST", "unterminated"}},
		{"srun without job id", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1"},
			[]string{"SLURM_JOB_ID", "SPARCML_PORT"}},
		{"srun rank too large", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, []string{"SLURM_PROCID=2", "SLURM_NTASKS=2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fromVars(t, tc.vars)
			wantErrContaining(t, err, tc.want...)
		})
	}
}

func TestFromEnvSrunTokenNeedsJobID(t *testing.T) {
	_, err := fromVars(t, map[string]string{
		"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1", "SPARCML_PORT": "6000",
	})
	wantErrContaining(t, err, "SPARCML_TOKEN is not set and SLURM_JOB_ID is not set")
}

func TestFirstNode(t *testing.T) {
	good := map[string]string{
		"node01":                "node01",
		"node[03-05,7]":         "node03",
		"node[7,03-05]":         "node7",
		"a1,b[2-3]":             "a1",
		"gpu[001-128],cpu[1-2]": "gpu001",
		"rack1-n[09-12]":        "rack1-n09",
		"n[1-2]-ib[3-4]":        "n1-ib3",
		"n[5]":                  "n5",
	}
	for list, want := range good {
		got, err := firstNode(list)
		if err != nil || got != want {
			t.Errorf("firstNode(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for _, bad := range []string{"", ",n1", "n[1-2", "n]1", "n[]", "n[a-b]", "n[-3]"} {
		if got, err := firstNode(bad); err == nil {
			t.Errorf("firstNode(%q) = %q, want an error", bad, got)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Env{Rank: 1, Size: 2, Addr: "h:1", Token: []byte("t"), Launcher: "torchrun"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*Env)
		want []string
	}{
		{"size zero", func(e *Env) { e.Size = 0; e.Rank = 0 }, []string{"WORLD_SIZE=0"}},
		{"size huge", func(e *Env) { e.Size = MaxSize + 1 }, []string{"WORLD_SIZE=1048577"}},
		{"rank too big", func(e *Env) { e.Rank = 2 }, []string{"RANK=2", "[0,2)"}},
		{"rank negative", func(e *Env) { e.Rank = -1 }, []string{"RANK=-1"}},
		{"bad addr", func(e *Env) { e.Addr = "nohost" }, []string{"SPARCML_ADDR", "host:port"}},
		{"bad addr source named", func(e *Env) { e.Addr = "h:99999"; e.AddrSource = "MASTER_ADDR:MASTER_PORT" }, []string{"MASTER_ADDR:MASTER_PORT"}},
		{"no token", func(e *Env) { e.Token = nil }, []string{"SPARCML_TOKEN"}},
		{"negative timeout", func(e *Env) { e.Timeout = -time.Second }, []string{"SPARCML_TIMEOUT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := ok
			tc.edit(&e)
			wantErrContaining(t, e.Validate(), tc.want...)
		})
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	raw, err := hex.DecodeString(a)
	if err != nil || len(raw) != 32 || strings.ToLower(a) != a {
		t.Errorf("NewToken() = %q (%v), want 64 lower-case hex digits", a, err)
	}
	if a == b {
		t.Errorf("two tokens are equal: %q", a)
	}
}

// without returns m minus the named variables.
func without(m map[string]string, names ...string) map[string]string {
	for _, n := range names {
		delete(m, n)
	}
	return m
}

func envEqual(a, b Env) bool {
	return a.Rank == b.Rank && a.Size == b.Size && a.Addr == b.Addr && bytes.Equal(a.Token, b.Token) &&
		a.TokenSource == b.TokenSource && a.IfName == b.IfName && a.Timeout == b.Timeout &&
		a.Launcher == b.Launcher && a.AddrSource == b.AddrSource
}

// wantErrContaining fails unless err is non-nil and its message contains
// every one of subs.
func wantErrContaining(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
