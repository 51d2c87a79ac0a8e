//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/sparcml/sparcml/transport"
)

// netnsChild is rank 1 of TestNetworkNamespacesApart, started in a
// network namespace of its own: rank 0's socket, named in the
// environment, must be out of its reach.
func netnsChild() error {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := New(ctx, Config{Rank: 1, Size: 2, Store: newFixedStore("shm/addr/0", os.Getenv(envChildAddr)), Token: testToken})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("New from another network namespace: %v, want connection refused", err)
	}
	return nil
}

// capturingStore hands the socket name rank 0 publishes to a channel.
type capturingStore chan string

func (s capturingStore) Set(ctx context.Context, key string, value []byte) error {
	s <- string(value)
	return nil
}
func (s capturingStore) Get(ctx context.Context, key string) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s capturingStore) Close() error { return nil }

// TestNetworkNamespacesApart: ranks in different network namespaces (as
// the emulated hosts of the cluster harness are) cannot reach each
// other's sockets, so they can never share memory by mistake.
func TestNetworkNamespacesApart(t *testing.T) {
	names := make(capturingStore, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := New(ctx, Config{Rank: 0, Size: 2, Store: names, Token: testToken})
		done <- err
	}()
	name := <-names
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=netns", envChildRank+"=1", envChildAddr+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	if err != nil {
		t.Fatalf("rank 1 in its own network namespace: %v\n%s", err, out)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0's New: %v, want it to wait for rank 1 until cancelled", err)
	}
}

// refuseChild is rank 1 of TestKernelRefusesReads, running as another
// user than rank 0: the kernel refuses its reads of rank 0's memory.
func refuseChild() error {
	rank, size, addr, err := childEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	log := &logBuffer{}
	st, tr, err := joinJob(ctx, rank, size, addr, func(c *Config) { c.Logf = log.logf; c.UnexpectedLimit = 0 })
	if err != nil {
		return err
	}
	defer st.Close()
	defer tr.Close()
	if tr.SingleCopy(0) {
		return errors.New("single copy from rank 0 although the kernel should refuse it")
	}
	if log.count("all go through the rings: operation not permitted") != 1 {
		return fmt.Errorf("the refusal is not logged once: %q", log.lines)
	}
	return exchangeLarge(ctx, tr, 0)
}

// exchangeLarge sends peer a large message and checks the one it sends.
func exchangeLarge(ctx context.Context, tr *Transport, peer int) error {
	const n = 8<<20 + 5
	tag := transport.Tag{Comm: 3, Seq: 1}
	r := tr.Recv(peer, tag, testDesc, make([]byte, n))
	s := tr.Send(peer, tag, testDesc, payload(tr.Rank(), peer, n))
	if err := r.Wait(ctx); err != nil {
		return err
	}
	if !bytes.Equal(r.Data(), payload(peer, tr.Rank(), n)) {
		return errors.New("wrong payload")
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}
	// Nobody closes before both have their data.
	done := tr.Send(peer, transport.Tag{Comm: 3, Seq: 2}, testDesc, nil)
	if err := tr.Recv(peer, transport.Tag{Comm: 3, Seq: 2}, testDesc, nil).Wait(ctx); err != nil {
		return err
	}
	return done.Wait(ctx)
}

// TestKernelRefusesReads: rank 1 runs as an unprivileged user, so the
// kernel refuses its process_vm_readv of rank 0's (root's) memory, while
// rank 0 may read rank 1's. Each direction takes the path the kernel
// allows: rank 0's large messages go through the ring, rank 1's are read
// from its memory; both arrive intact, and rank 1 logs the refusal once.
func TestKernelRefusesReads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to start one rank as another user")
	}
	// The test binary, where an unprivileged user can run it.
	dir, err := os.MkdirTemp("", "shm-refuse")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := dir + "/shm.test"
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envChild+"=refuse", envChildRank+"=1", envChildSize+"=2", envChildAddr+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, tr, err := joinJob(ctx, 0, 2, addr, func(c *Config) { c.UnexpectedLimit = 0 })
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !tr.SingleCopy(1) {
		t.Errorf("rank 0 (root) cannot read rank 1's memory")
	}
	if err := exchangeLarge(ctx, tr, 1); err != nil {
		t.Errorf("rank 0: %v", err)
	}
	tr.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rank 1: %v\n%s", err, out.String())
	}
}
