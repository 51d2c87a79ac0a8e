package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Job describes ranks to start on the cluster, as a launcher would: rank r
// runs on Hosts[r / RanksPerHost] with SPARCML_RANK, SPARCML_SIZE,
// SPARCML_ADDR (rank 0's host, on network AddrNet), SPARCML_TOKEN and
// SPARCML_IFNAME set.
type Job struct {
	Cmd          []string
	RanksPerHost int      // default 1
	Hosts        []int    // default every host
	Env          []string // extra VAR=VALUE for every rank
	// IfName is SPARCML_IFNAME; default the interface of network 0.
	// "-" leaves it unset, so the runtime chooses.
	IfName string
	// AddrNet is the network whose address of rank 0's host is the
	// rendezvous address; default 0.
	AddrNet int
	Token   string // default a random one
}

// Result is one rank's outcome.
type Result struct {
	Rank, Host     int
	Stdout, Stderr string
	ExitCode       int   // -1 if it did not exit (killed by a signal, or not started)
	Err            error // from exec (nil on exit status 0)
	Elapsed        time.Duration
}

// Running is a job whose ranks have been started.
type Running struct {
	Ranks []*Rank
	Token string
	Addr  string
}

// Rank is one started rank process.
type Rank struct {
	Rank, Host     int
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	start          time.Time
	done           chan struct{}
	err            error
	elapsed        time.Duration
}

// LauncherEnv is the environment a launcher gives rank r of a job of size
// ranks (local is its index among the localSize ranks of its host); ifname
// "-" leaves SPARCML_IFNAME unset.
func LauncherEnv(r, size, local, localSize int, addr, token, ifname string) []string {
	env := []string{
		"SPARCML_RANK=" + strconv.Itoa(r), "SPARCML_SIZE=" + strconv.Itoa(size),
		"SPARCML_LOCAL_RANK=" + strconv.Itoa(local), "SPARCML_LOCAL_SIZE=" + strconv.Itoa(localSize),
		"SPARCML_ADDR=" + addr, "SPARCML_TOKEN=" + token,
	}
	if ifname != "-" {
		env = append(env, "SPARCML_IFNAME="+ifname)
	}
	return env
}

// Start starts every rank of j and returns at once.
func (c *Cluster) Start(j Job) (*Running, error) {
	if len(j.Cmd) == 0 {
		return nil, errors.New("cluster: job without a command")
	}
	if j.RanksPerHost <= 0 {
		j.RanksPerHost = 1
	}
	hosts := c.Hosts()
	if j.Hosts == nil {
		for i := range hosts {
			j.Hosts = append(j.Hosts, i)
		}
	}
	if j.IfName == "" {
		j.IfName = IfName(0)
	}
	if j.Token == "" {
		b := make([]byte, 16)
		rand.Read(b)
		j.Token = hex.EncodeToString(b)
	}
	// A new port per job: the previous job's store may still be in
	// TIME_WAIT on rank 0's host.
	c.mu.Lock()
	port := 29500 + c.jobs%1000
	c.jobs++
	c.mu.Unlock()
	run := &Running{Token: j.Token, Addr: fmt.Sprintf("%s:%d", hosts[j.Hosts[0]].Addrs[j.AddrNet], port)}
	size := len(j.Hosts) * j.RanksPerHost
	for r := 0; r < size; r++ {
		h := j.Hosts[r/j.RanksPerHost]
		env := LauncherEnv(r, size, r%j.RanksPerHost, j.RanksPerHost, run.Addr, j.Token, j.IfName)
		rk, err := c.StartProcess(h, append(env, j.Env...), j.Cmd...)
		if err != nil {
			run.Kill()
			return nil, err
		}
		rk.Rank = r
		run.Ranks = append(run.Ranks, rk)
	}
	return run, nil
}

// StartProcess starts one process on host with env added to this
// process's environment (a rank started by hand, an intruder, a probe).
func (c *Cluster) StartProcess(host int, env []string, cmdline ...string) (*Rank, error) {
	cmd := c.Command(host, cmdline[0], cmdline[1:]...)
	cmd.Env = append(os.Environ(), env...)
	rk := &Rank{Rank: -1, Host: host, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &rk.stdout, &rk.stderr
	rk.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start %v on host %d: %w", cmdline, host, err)
	}
	go func() {
		rk.err = cmd.Wait()
		rk.elapsed = time.Since(rk.start)
		close(rk.done)
	}()
	return rk, nil
}

// Stdout returns what the rank printed so far.
func (r *Rank) Stdout() string { return r.stdout.String() }

// Stderr returns what the rank printed to standard error so far.
func (r *Rank) Stderr() string { return r.stderr.String() }

// Done is closed when the rank has exited.
func (r *Rank) Done() <-chan struct{} { return r.done }

// Kill SIGKILLs the rank.
func (r *Rank) Kill() { r.cmd.Process.Kill() }

// Result returns the rank's outcome; call it after Done.
func (r *Rank) Result() Result {
	res := Result{Rank: r.Rank, Host: r.Host, Stdout: r.Stdout(), Stderr: r.Stderr(), ExitCode: -1}
	select {
	case <-r.done:
		res.Err, res.Elapsed = r.err, r.elapsed
		if r.err == nil {
			res.ExitCode = 0
		} else if ee, ok := r.err.(*exec.ExitError); ok {
			res.ExitCode = ee.ExitCode()
		}
	default:
		res.Err = errors.New("still running")
	}
	return res
}

// WaitOutput waits until rank's standard output contains s.
func (j *Running) WaitOutput(rank int, s string, timeout time.Duration) error {
	rk := j.Ranks[rank]
	deadline := time.After(timeout)
	for !strings.Contains(rk.Stdout(), s) {
		select {
		case <-rk.done:
			if strings.Contains(rk.Stdout(), s) {
				return nil
			}
			return fmt.Errorf("rank %d exited before printing %q: %v\nstdout:\n%s\nstderr:\n%s", rank, s, rk.err, rk.Stdout(), rk.Stderr())
		case <-deadline:
			return fmt.Errorf("rank %d did not print %q within %v\nstdout:\n%s\nstderr:\n%s", rank, s, timeout, rk.Stdout(), rk.Stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Wait waits for every rank, at most timeout; ranks still running then are
// killed and the error says which (a hang).
func (j *Running) Wait(timeout time.Duration) ([]Result, error) {
	deadline := time.After(timeout)
	var hung []string
	for _, rk := range j.Ranks {
		select {
		case <-rk.done:
		case <-deadline:
			hung = j.hung()
			j.dumpStacks()
			j.Kill()
		}
		if hung != nil {
			break
		}
	}
	for _, rk := range j.Ranks {
		<-rk.done
	}
	res := make([]Result, len(j.Ranks))
	for i, rk := range j.Ranks {
		res[i] = rk.Result()
	}
	if hung != nil {
		return res, fmt.Errorf("cluster: ranks %s did not exit within %v (hang)", strings.Join(hung, ", "), timeout)
	}
	return res, nil
}

func (j *Running) hung() []string {
	var out []string
	for _, rk := range j.Ranks {
		select {
		case <-rk.done:
		default:
			out = append(out, fmt.Sprintf("%d (host %d)", rk.Rank, rk.Host))
		}
	}
	return out
}

// dumpStacks sends SIGQUIT to the ranks still running, so that Go programs
// print every goroutine's stack to their standard error before they are
// killed, and gives them a moment to do it.
func (j *Running) dumpStacks() {
	for _, rk := range j.Ranks {
		select {
		case <-rk.done:
		default:
			rk.cmd.Process.Signal(syscall.SIGQUIT)
		}
	}
	t := time.After(2 * time.Second)
	for _, rk := range j.Ranks {
		select {
		case <-rk.done:
		case <-t:
			return
		}
	}
}

// Kill SIGKILLs every rank still running.
func (j *Running) Kill() {
	for _, rk := range j.Ranks {
		select {
		case <-rk.done:
		default:
			rk.Kill()
		}
	}
}

// Run starts cmd with ranksPerHost ranks on every host and waits for all
// of them, at most timeout.
func (c *Cluster) Run(timeout time.Duration, ranksPerHost int, cmd ...string) ([]Result, error) {
	j, err := c.Start(Job{Cmd: cmd, RanksPerHost: ranksPerHost})
	if err != nil {
		return nil, err
	}
	return j.Wait(timeout)
}

// Describe formats results for a failure message.
func Describe(res []Result) string {
	var b strings.Builder
	for _, r := range res {
		fmt.Fprintf(&b, "--- rank %d (host %d): exit %d after %v\n", r.Rank, r.Host, r.ExitCode, r.Elapsed.Round(time.Millisecond))
		if s := strings.TrimSpace(r.Stdout); s != "" {
			fmt.Fprintf(&b, "stdout:\n%s\n", s)
		}
		if s := strings.TrimSpace(r.Stderr); s != "" {
			fmt.Fprintf(&b, "stderr:\n%s\n", s)
		}
	}
	return b.String()
}

// syncBuffer is a bytes.Buffer safe for a writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
