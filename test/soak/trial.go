//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sparcml/sparcml/internal/procwatch"
)

// phase is where a kill is aimed: Init, or one of the operations (the
// bench's arguments, which loop until the kill).
type phase struct {
	name string
	args []string
}

const aimInit = "Init"

// Phases as a trial's result names them: where the kill landed, read
// from what the survivors report.
const (
	landedBeforeStore = "Init, before the store"
	landedInit        = "Init"
	landedStartUp     = "start-up after Init"
)

// opPhases are the operations a kill may land in: a dense, a sparse and
// the compressor's reduction (`bench --op compress`).
func opPhases() []phase {
	loop := []string{"--iters", "100000000", "--warmup", "0"}
	ps := []phase{
		{"dense allreduce", []string{"--op", "allreduce", "--sizes", "256K"}},
		{"sparse allreduce", []string{"--op", "sparse-allreduce", "--sizes", "1M"}},
		{"compressor reduction", []string{"--op", "compress", "--sizes", "1M"}},
	}
	for i := range ps {
		ps[i].args = append(append([]string{"bench"}, ps[i].args...), loop...)
	}
	return ps
}

func describePhases(ps []phase) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.name)
	}
	return strings.Join(names, ", ")
}

type soak struct {
	bin     string
	rng     *rand.Rand
	phases  []phase
	ready   map[int]time.Duration // the last Init time seen at each job size
	verbose bool
}

// rank is one process of a trial's job.
type rank struct {
	pid    int
	stderr *syncBuffer // by hand; under run, the launcher's lines of this rank
	exited chan struct{}
	at     time.Time // when it exited
	code   int       // exit status; -1 unknown (under run: no line from the launcher)
}

// result is one trial's outcome.
type result struct {
	trial    int
	p        int
	byHand   bool
	aimed    string
	landed   string
	victim   int
	upAtKill bool // rank 0 had said its Init was over
	hung     int
	zero     int
	misnamed int
	late     int
	left     []string
	worst    time.Duration
	notes    []string
}

func (r *result) clean() bool {
	return r.hung == 0 && r.zero == 0 && r.misnamed == 0 && r.late == 0 && len(r.left) == 0
}

func (r *result) summary() string {
	how := "sparcml run"
	if r.byHand {
		how = "by hand"
	}
	verdict := "clean"
	if !r.clean() {
		verdict = fmt.Sprintf("NOT CLEAN: hung %d, exited 0 %d, misnamed %d, late %d, left behind %v", r.hung, r.zero, r.misnamed, r.late, r.left)
	}
	s := fmt.Sprintf("trial %d: P=%d %s, rank %d killed aiming at %s, landed in %s, worst detection %v: %s",
		r.trial, r.p, how, r.victim, r.aimed, r.landed, r.worst.Round(time.Millisecond), verdict)
	for _, n := range r.notes {
		s += "\n    " + n
	}
	return s
}

// trial runs one job of p ranks and kills one.
func (s *soak) trial(ctx context.Context, n, p int, byHand bool) *result {
	token := fmt.Sprintf("soak-%d-%x", n, s.rng.Uint64())
	ph := s.phases[0] // Init kills run the dense loop
	aimed := aimInit
	if k := s.rng.IntN(len(s.phases) + 1); k > 0 {
		ph, aimed = s.phases[k-1], s.phases[k-1].name
	}
	res := &result{trial: n, p: p, byHand: byHand, aimed: aimed, victim: s.rng.IntN(p)}
	shmBefore := shmFiles()
	env := append(os.Environ(), "SPARCML_TOKEN="+token, "SPARCML_DEBUG=VERSION",
		"SPARCML_INIT_TIMEOUT="+initTimeout.String(), "SPARCML_TIMEOUT="+initTimeout.String())
	start := time.Now()
	var ranks []*rank
	var launcher *exec.Cmd
	var launcherOut *syncBuffer
	if byHand {
		ranks = s.startByHand(p, ph.args, env)
	} else {
		launcher, launcherOut, ranks = s.startRun(ctx, p, ph.args, env)
	}
	defer killToken(token)
	ready0 := func() (time.Duration, bool) { return readyTime(ranks[0].stderr.String()) }
	var delay time.Duration
	if aimed == aimInit {
		est, ok := s.ready[p]
		if !ok {
			est = time.Second
		}
		delay = time.Duration((0.03 + 0.87*s.rng.Float64()) * float64(est))
	} else {
		for {
			if _, ok := ready0(); ok {
				break
			}
			if time.Since(start) > 2*initTimeout || ctx.Err() != nil {
				res.notes = append(res.notes, "the job never came up: "+lastLine(ranks[0].stderr.String()))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		delay = time.Since(start) + time.Duration((0.2+0.8*s.rng.Float64())*float64(time.Second))
	}
	time.Sleep(time.Until(start.Add(delay)))
	victim := ranks[res.victim]
	for victim.pid == 0 && time.Since(start) < initTimeout { // under run, not yet started
		time.Sleep(time.Millisecond)
	}
	_, res.upAtKill = ready0()
	syscall.Kill(victim.pid, syscall.SIGKILL)
	killed := time.Now()
	s.await(ranks, res, killed)
	if launcher != nil {
		waitCmd(launcher, 5*time.Second)
		parseRunStatuses(launcherOut.String(), ranks)
	}
	if d, ok := ready0(); ok {
		s.ready[p] = d
	}
	s.check(res, ranks, killed)
	time.Sleep(20 * time.Millisecond) // the kernel reaps what the job left
	res.left = append(res.left, leftovers(token, shmBefore)...)
	return res
}

// startByHand starts each rank as a user would without a launcher: its
// own process with SPARCML_RANK, SPARCML_SIZE and SPARCML_ADDR.
func (s *soak) startByHand(p int, args, env []string) []*rank {
	addr := freeAddr()
	ranks := make([]*rank, p)
	for r := range p {
		cmd := exec.Command(s.bin, args...)
		cmd.Env = append(env, "SPARCML_RANK="+strconv.Itoa(r), "SPARCML_SIZE="+strconv.Itoa(p), "SPARCML_ADDR="+addr)
		out := &syncBuffer{}
		cmd.Stderr = out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		rk := &rank{stderr: out, exited: make(chan struct{}), code: -1}
		ranks[r] = rk
		if err := cmd.Start(); err != nil {
			fatalf("starting rank %d: %v", r, err)
		}
		rk.pid = cmd.Process.Pid
		go func() {
			cmd.Wait()
			rk.at, rk.code = time.Now(), cmd.ProcessState.ExitCode()
			close(rk.exited)
		}()
	}
	return ranks
}

// startRun starts the job under `sparcml run --keep-going`; each rank's
// pid is found among the launcher's children by its SPARCML_RANK, and its
// exit seen by polling /proc.
func (s *soak) startRun(ctx context.Context, p int, args, env []string) (*exec.Cmd, *syncBuffer, []*rank) {
	cmd := exec.Command(s.bin, append([]string{"run", "-n", strconv.Itoa(p), "--keep-going", "--", s.bin}, args...)...)
	cmd.Env = env
	out := &syncBuffer{}
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fatalf("starting sparcml run: %v", err)
	}
	ranks := make([]*rank, p)
	for r := range ranks {
		ranks[r] = &rank{stderr: &syncBuffer{prefix: fmt.Sprintf("[%d] ", r), of: out}, exited: make(chan struct{}), code: -1}
	}
	go func() {
		found := 0
		for deadline := time.Now().Add(initTimeout); found < p && time.Now().Before(deadline); {
			for _, kid := range procwatch.Children(cmd.Process.Pid) {
				r, ok := envRank(kid)
				if ok && r < p && ranks[r].pid == 0 {
					ranks[r].pid = kid
					found++
					go pollExit(ranks[r])
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return cmd, out, ranks
}

func pollExit(rk *rank) {
	for procwatch.Alive(rk.pid) {
		time.Sleep(2 * time.Millisecond)
	}
	rk.at = time.Now()
	close(rk.exited)
}

// await waits for every survivor until hangAfter past the kill.
func (s *soak) await(ranks []*rank, res *result, killed time.Time) {
	deadline := time.NewTimer(time.Until(killed.Add(hangAfter)))
	defer deadline.Stop()
	for r, rk := range ranks {
		if r == res.victim {
			continue
		}
		select {
		case <-rk.exited:
		case <-deadline.C:
			res.hung++
			res.notes = append(res.notes, fmt.Sprintf("rank %d hangs: %s", r, lastLine(rk.stderr.String())))
			syscall.Kill(rk.pid, syscall.SIGKILL)
			<-rk.exited
			rk.code = -2
			deadline.Reset(time.Second)
		}
	}
}

// The causes of a victim that died before it reached the store, or
// before rank 0's store listened: the others cannot tell it from a rank
// not yet started, and wait for SPARCML_INIT_TIMEOUT.
var (
	neverReached = "never reached the rendezvous store"
	noStore      = "cannot reach rank 0's rendezvous store"
)

// check classifies where the kill landed and judges each survivor.
func (s *soak) check(res *result, ranks []*rank, killed time.Time) {
	named := regexp.MustCompile(`\brank ` + strconv.Itoa(res.victim) + `\b`)
	res.landed = res.aimed
	var all strings.Builder
	for r, rk := range ranks {
		if r != res.victim {
			all.WriteString(rk.stderr.String())
		}
	}
	out := all.String()
	limit := bound
	switch {
	case strings.Contains(out, neverReached) || strings.Contains(out, noStore):
		res.landed, limit = landedBeforeStore, initTimeout+3*time.Second
	case res.aimed == aimInit && res.upAtKill:
		res.landed = landedStartUp
	case res.aimed == aimInit || strings.Contains(out, "the launch failed"):
		res.landed = landedInit
	}
	for r, rk := range ranks {
		if r == res.victim || rk.code == -2 {
			continue
		}
		el := rk.at.Sub(killed)
		res.worst = max(res.worst, el)
		msg := rk.stderr.String()
		switch {
		case rk.code == 0:
			res.zero++
			res.notes = append(res.notes, fmt.Sprintf("rank %d exited 0", r))
		case !named.MatchString(msg):
			res.misnamed++
			res.notes = append(res.notes, fmt.Sprintf("rank %d does not name rank %d: %s", r, res.victim, lastLine(msg)))
		}
		if el > limit {
			res.late++
			res.notes = append(res.notes, fmt.Sprintf("rank %d exited %v after the kill (bound %v): %s", r, el.Round(time.Millisecond), limit, lastLine(msg)))
		}
	}
}

// parseRunStatuses reads each rank's exit from sparcml run's lines; a
// rank it says nothing about exited 0 (--keep-going names every failure).
var runLine = regexp.MustCompile(`(?m)^sparcml run: rank (\d+) (exited with status (\d+)|killed by signal [^;\n]*|[^;\n]*)`)

func parseRunStatuses(out string, ranks []*rank) {
	for _, rk := range ranks {
		if rk.code != -2 { // hung, killed by the soak
			rk.code = 0
		}
	}
	for _, m := range runLine.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[1])
		if r >= len(ranks) {
			continue
		}
		if ranks[r].code == -2 {
			continue
		}
		if code, err := strconv.Atoi(m[3]); err == nil {
			ranks[r].code = code
		} else {
			ranks[r].code = 1 // a signal or another failure, not 0
		}
	}
}

var readyLine = regexp.MustCompile(`ready in ([0-9.]+[a-zµ]+)`)

// readyTime finds rank 0's "ready in" line: its Init is over.
func readyTime(stderr string) (time.Duration, bool) {
	m := readyLine.FindStringSubmatch(stderr)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	return d, err == nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitCmd(cmd *exec.Cmd, d time.Duration) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func envRank(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0, false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("SPARCML_RANK=")); ok {
			r, err := strconv.Atoi(string(v))
			return r, err == nil
		}
	}
	return 0, false
}

// syncBuffer is a stderr buffer read while the process writes it. A view
// (of != nil) shows only the lines of another buffer with its prefix.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	prefix string
	of     *syncBuffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	if b.of != nil {
		var lines []string
		for _, l := range strings.Split(b.of.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, b.prefix); ok {
				lines = append(lines, rest)
			}
		}
		return strings.Join(lines, "\n")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
