//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/sparcml/sparcml/internal/bootstrap"
)

// The multi-process tests run ranks as child processes: this test binary
// again, told by the environment which rank it is and what to do.
const (
	envChild     = "SHM_TEST_CHILD" // the child's role: kill, netns, refuse, bench
	envChildRank = "SHM_TEST_RANK"
	envChildSize = "SHM_TEST_SIZE"
	envChildAddr = "SHM_TEST_ADDR"
	envChildOpts = "SHM_TEST_OPTS" // "rings": NoSingleCopy
	envVictim    = "SHM_TEST_VICTIM"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	var err error
	switch role {
	case "kill":
		err = killChild()
	case "netns":
		err = netnsChild()
	case "bench":
		err = benchChild()
	case "refuse":
		err = refuseChild()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv(envChildRank), err)
		return 1
	}
	return 0
}

func childEnv() (rank, size int, addr string, err error) {
	rank, err = strconv.Atoi(os.Getenv(envChildRank))
	if err == nil {
		size, err = strconv.Atoi(os.Getenv(envChildSize))
	}
	return rank, size, os.Getenv(envChildAddr), err
}

// joinJob connects rank to the job's store (served by rank 0, the test
// process) and sets up its shared-memory transport.
func joinJob(ctx context.Context, rank, size int, addr string, mod func(*Config)) (bootstrap.Store, *Transport, error) {
	st, err := bootstrap.Connect(ctx, bootstrap.Env{Rank: rank, Size: size, Addr: addr, Token: testToken}, nil)
	if err != nil {
		return nil, nil, err
	}
	cfg := Config{Rank: rank, Size: size, Store: st, Token: testToken, UnexpectedLimit: 64 << 10}
	if os.Getenv(envChildOpts) == "rings" {
		cfg.NoSingleCopy = true
	}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := New(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, tr, nil
}

func devShm(t *testing.T) []string {
	entries, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Logf("/dev/shm: %v", err)
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startChildren starts ranks 1..size-1 of a job whose store rank 0
// (this process) serves at addr.
func startChildren(t *testing.T, role string, size int, addr string, extra ...string) ([]*exec.Cmd, []*bytes.Buffer) {
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for r := 1; r < size; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+role, envChildRank+"="+strconv.Itoa(r),
			envChildSize+"="+strconv.Itoa(size), envChildAddr+"="+addr)
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stderr = os.Stderr
		out := new(bytes.Buffer)
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	return cmds, outs
}
