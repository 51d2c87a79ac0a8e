// Package launch starts the ranks of a job on this host: the one-host
// counterpart of mpirun or torchrun. It gives each process the SPARCML_*
// environment and torchrun's (so a PyTorch script runs under it
// unchanged), prefixes their output with the rank, forwards signals, and
// when one rank fails stops the others and reports which rank failed.
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Config describes a local job.
type Config struct {
	N       int      // number of ranks
	Program string   // executable
	Args    []string // its arguments
	Env     []string // extra KEY=VALUE entries for every rank
	Stdout  io.Writer
	Stderr  io.Writer
	// Prefix prefixes every output line with "[rank] ".
	Prefix bool
	// Grace is how long the other ranks get to exit after SIGTERM once
	// one rank failed, before SIGKILL. Default 3s.
	Grace time.Duration
	// Timeout bounds the whole job (0: none).
	Timeout time.Duration
	// BindCores binds rank r to one CPU, the r-th (modulo their number)
	// of those the launcher may run on, as mpirun --bind-to core does:
	// the scheduler then never puts two busy ranks on one CPU while
	// another idles, nor moves a rank away from its warm cache. Linux
	// only.
	BindCores bool
	// KeepGoing leaves the other ranks running when one fails, for jobs
	// whose survivors go on without it (SPARCML_ON_PEER_LOSS=revoke); the
	// job still reports the first failure once every rank has exited.
	KeepGoing bool
	// Token is the job secret given to every rank as SPARCML_TOKEN; empty
	// means a fresh random one.
	Token string
}

// RankError says which rank failed and how.
type RankError struct {
	Rank int
	Err  error
	Code int // exit code to propagate
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d %v", e.Rank, e.Err) }
func (e *RankError) Unwrap() error { return e.Err }

// Run starts the job and waits for it. It returns nil when every rank
// exits with status 0, else a *RankError for the first rank that failed.
func Run(ctx context.Context, cfg Config) error {
	if cfg.N < 1 {
		return fmt.Errorf("launch: -n must be at least 1, got %d", cfg.N)
	}
	if cfg.Program == "" {
		return errors.New("launch: no program to run")
	}
	path, err := exec.LookPath(cfg.Program)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if cfg.Grace == 0 {
		cfg.Grace = 3 * time.Second
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	env, err := jobEnv(cfg)
	if err != nil {
		return err
	}
	var cpus []int
	if cfg.BindCores {
		if cpus, err = allowedCPUs(); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Stderr, "sparcml run: binding %d ranks to CPUs %v, rank r to the r-th (modulo %d)\n", cfg.N, cpus, len(cpus))
	}
	var outMu sync.Mutex
	cmds := make([]*exec.Cmd, cfg.N)
	for r := range cmds {
		cmd := exec.Command(path, cfg.Args...)
		cmd.Env = append(append([]string{}, env...), rankEnv(r)...)
		// Own process group: a terminal's Ctrl-C reaches the launcher
		// only, which forwards it once to every rank's whole group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout = newPrefixWriter(cfg.Stdout, &outMu, r, cfg.Prefix)
		cmd.Stderr = newPrefixWriter(cfg.Stderr, &outMu, r, cfg.Prefix)
		cmds[r] = cmd
	}
	started, err := startAll(cmds, cpus)
	j := &job{cfg: cfg, cmds: cmds[:started], exited: make(chan rankExit, cfg.N)}
	if err != nil {
		j.signalAll(syscall.SIGKILL)
		return err
	}
	for r, cmd := range j.cmds {
		go func() {
			err := cmd.Wait()
			flushWriter(cmd.Stdout)
			flushWriter(cmd.Stderr)
			j.exited <- rankExit{r, err}
		}()
	}
	return j.wait(ctx)
}

// startAll starts the ranks' commands, bound to cpus (startBound) unless
// cpus is empty, and returns how many started.
func startAll(cmds []*exec.Cmd, cpus []int) (int, error) {
	if len(cpus) > 0 {
		return startBound(cmds, cpus)
	}
	for r, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			return r, fmt.Errorf("launch: start rank %d: %w", r, err)
		}
	}
	return len(cmds), nil
}

type rankExit struct {
	rank int
	err  error
}

type job struct {
	cfg    Config
	cmds   []*exec.Cmd
	exited chan rankExit
}

// wait collects exits; on the first failure, a signal or the timeout it
// stops the rest.
func (j *job) wait(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var timeout <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var first *RankError
	var kill <-chan time.Time
	stopping := false
	stop := func() {
		if !stopping {
			stopping = true
			j.signalAll(syscall.SIGTERM)
			kill = time.After(j.cfg.Grace)
		}
	}
	for left := len(j.cmds); left > 0; {
		select {
		case e := <-j.exited:
			left--
			if e.err != nil && first != nil && j.cfg.KeepGoing && !stopping {
				// Each rank's own end, for jobs that go on without one.
				fmt.Fprintf(j.cfg.Stderr, "sparcml run: rank %d %v\n", e.rank, describeExit(e.err))
			}
			if e.err != nil && first == nil && !stopping {
				first = &RankError{Rank: e.rank, Err: describeExit(e.err), Code: exitCode(e.err)}
				if j.cfg.KeepGoing {
					fmt.Fprintf(j.cfg.Stderr, "sparcml run: rank %d %v; the other ranks go on (--keep-going)\n", e.rank, first.Err)
					continue
				}
				fmt.Fprintf(j.cfg.Stderr, "sparcml run: rank %d %v; stopping the other ranks\n", e.rank, first.Err)
				stop()
			}
		case s := <-sigs:
			fmt.Fprintf(j.cfg.Stderr, "sparcml run: got %v, forwarding to all ranks\n", s)
			j.signalAll(s.(syscall.Signal))
			if first == nil {
				first = &RankError{Rank: -1, Err: fmt.Errorf("interrupted by %v", s), Code: 128 + int(s.(syscall.Signal))}
			}
			if !stopping {
				stopping = true
				kill = time.After(j.cfg.Grace)
			}
		case <-timeout:
			fmt.Fprintf(j.cfg.Stderr, "sparcml run: job timed out after %v; stopping all ranks\n", j.cfg.Timeout)
			if first == nil {
				first = &RankError{Rank: -1, Err: fmt.Errorf("timed out after %v", j.cfg.Timeout), Code: 124}
			}
			stop()
		case <-ctx.Done():
			if first == nil {
				first = &RankError{Rank: -1, Err: ctx.Err(), Code: 1}
			}
			stop()
		case <-kill:
			j.signalAll(syscall.SIGKILL)
			kill = nil
		}
	}
	if first != nil {
		return first
	}
	return nil
}

func (j *job) signalAll(sig syscall.Signal) {
	for _, c := range j.cmds {
		if c.Process != nil && c.ProcessState == nil {
			// Negative pid: the rank's whole process group.
			_ = syscall.Kill(-c.Process.Pid, sig)
		}
	}
}

func describeExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("was killed by %v", ws.Signal())
		}
		return fmt.Errorf("exited with status %d", ee.ExitCode())
	}
	return err
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		if c := ee.ExitCode(); c > 0 {
			return c
		}
	}
	return 1
}

// rankEnv is rank r's own part of the environment: its rank in sparcml's
// and torchrun's variables (every rank runs on this host, so its local
// rank is its rank).
func rankEnv(r int) []string {
	rank := strconv.Itoa(r)
	return []string{"SPARCML_RANK=" + rank, "SPARCML_LOCAL_RANK=" + rank, "RANK=" + rank, "LOCAL_RANK=" + rank}
}

// jobEnv is the environment shared by every rank: sparcml's variables and
// torchrun's. The two rendezvous ports differ: a PyTorch program's
// TCPStore listens on MASTER_PORT while a sparcml program's store listens
// on SPARCML_ADDR's port (sparcml's variables take priority over
// torchrun's in sparcml.Init), so a program that uses both, such as a
// PyTorch script calling sparcml through a binding, starts two stores
// that do not collide.
func jobEnv(cfg Config) ([]string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("launch: pick rendezvous ports: %w", err)
	}
	port, masterPort := ports[0], ports[1]
	token := cfg.Token
	if token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		token = hex.EncodeToString(b)
	}
	env := os.Environ()
	size := strconv.Itoa(cfg.N)
	env = append(env,
		"SPARCML_SIZE="+size,
		"SPARCML_LOCAL_SIZE="+size,
		"SPARCML_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"SPARCML_TOKEN="+token,
		"WORLD_SIZE="+size,
		"LOCAL_WORLD_SIZE="+size,
		"MASTER_ADDR=127.0.0.1",
		"MASTER_PORT="+strconv.Itoa(masterPort),
	)
	return append(env, cfg.Env...), nil
}

// freePorts asks the kernel for n distinct unused loopback ports, holding
// each until all are chosen so that none is handed out twice. Another
// process could take one before the job binds it; the rank that binds it
// then fails with a clear "address in use" error.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
