package cluster

// The fault-injection suite: a rank killed with SIGKILL at a random
// moment (during Init, dense, sparse and non-blocking operations) at
// P = 4 and 8, a rank stopped with SIGSTOP past and short of the
// deadline, a host's link going down, packet loss on every link, and the
// survivors of a kill shrinking and going on. `make test` runs
// SPARCML_CLUSTER_FAULT_TRIALS=10 kill trials per job size, `make
// test-faults` 100; docs/RELIABILITY.md has the table of results.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultTimeout is SPARCML_TIMEOUT (and SPARCML_INIT_TIMEOUT) of the
// suite's jobs.
const faultTimeout = 10 * time.Second

func faultTrials(t *testing.T) int {
	if s := os.Getenv("SPARCML_CLUSTER_FAULT_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "SPARCML_CLUSTER_FAULT_TRIALS")
		return n
	}
	return 10
}

// errorWatch records, for each rank, when its standard error first held
// an error line of testprog ("ERR:", "INIT:" or "WRONG:"), or when it
// exited: the moment it detected the failure. A rank may exit later
// (rank 0 waits for its store's clients), but it has reported by then.
type errorWatch struct {
	run  *Running
	seen []time.Time
}

func watchErrors(run *Running) *errorWatch {
	return &errorWatch{run: run, seen: make([]time.Time, len(run.Ranks))}
}

// wait polls until every rank but victims has reported, at most timeout,
// and returns the ranks that have not (a hang).
func (w *errorWatch) wait(victims []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var missing []int
		for i, rk := range w.run.Ranks {
			if slices.Contains(victims, rk.Rank) || !w.seen[i].IsZero() {
				continue
			}
			select {
			case <-rk.done:
				w.seen[i] = rk.start.Add(rk.elapsed)
			default:
				if hasErrorLine(rk.Stderr()) {
					w.seen[i] = time.Now()
				} else {
					missing = append(missing, rk.Rank)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ranks %v neither failed nor exited within %v of the fault (hang)", missing, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasErrorLine(s string) bool {
	return strings.Contains(s, "ERR: ") || strings.Contains(s, "INIT: ") || strings.Contains(s, "WRONG: ")
}

// slowDetection: a trial named in time but slower than this is shown
// with the survivors' errors, so the table's worst case can be read
// (a victim killed before it reached the store is named at
// SPARCML_INIT_TIMEOUT).
const slowDetection = 5 * time.Second

// trial is the outcome of one fault.
type trial struct {
	outcome string        // named, unnamed, late, hang, survived
	detect  time.Duration // the last survivor's detection after the fault
	inInit  bool          // the victim died before finishing its first round of operations
	detail  string
}

// faultStats sums trials for the table.
type faultStats struct {
	n, named, unnamed, late, hangs, survived int
	detect                                   []time.Duration
	examples                                 []string
}

func (s *faultStats) add(tr trial) {
	s.n++
	switch tr.outcome {
	case "named":
		s.named++
	case "unnamed":
		s.unnamed++
	case "late":
		s.late++
	case "hang":
		s.hangs++
	default:
		s.survived++
	}
	if tr.outcome != "hang" {
		s.detect = append(s.detect, tr.detect)
	}
	if (tr.outcome != "named" || tr.detect > slowDetection) && len(s.examples) < 3 {
		s.examples = append(s.examples, tr.detail)
	}
}

func (s *faultStats) row(what string) string {
	slices.Sort(s.detect)
	med, worst := time.Duration(0), time.Duration(0)
	if len(s.detect) > 0 {
		med, worst = s.detect[len(s.detect)/2], s.detect[len(s.detect)-1]
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %v | %v |", what, s.n, s.named, s.unnamed,
		s.late, s.hangs, s.survived, med.Round(time.Millisecond), worst.Round(time.Millisecond))
}

// judge classifies a fault's aftermath: every rank but victims must have
// failed (exit status not 0) by deadline after the fault, with an error
// naming a victim.
func judge(res []Result, seen []time.Time, victims []int, fault time.Time, deadline time.Duration, hung error) trial {
	tr := trial{outcome: "named"}
	if hung != nil {
		return trial{outcome: "hang", detail: hung.Error() + "\n" + Describe(res)}
	}
	for i, r := range res {
		if slices.Contains(victims, r.Rank) {
			continue
		}
		d := seen[i].Sub(fault)
		tr.detect = max(tr.detect, d)
		switch {
		case r.ExitCode == 0:
			tr.outcome, tr.detail = "survived", fmt.Sprintf("rank %d exited 0", r.Rank)
		case d > deadline && tr.outcome == "named":
			tr.outcome, tr.detail = "late", fmt.Sprintf("rank %d failed %v after the fault:\n%s", r.Rank, d, r.Stderr)
		case !namesAny(errorLines(r.Stderr), victims) && tr.outcome == "named":
			tr.outcome, tr.detail = "unnamed", fmt.Sprintf("rank %d does not name %v:\n%s", r.Rank, victims, errorLines(r.Stderr))
		}
	}
	return tr
}

// errorLines keeps testprog's error lines of a rank's standard error.
func errorLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if hasErrorLine(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// killTrial starts the mixed workload with per ranks per host and
// SIGKILLs a random rank at a random moment: in half the trials within
// the first 2 s (Init, whose calibration takes about that long on the
// shared cluster), in the others within a second after the victim has
// finished its first round of operations; then it judges the survivors.
func killTrial(t *testing.T, c *Cluster, per int, rng *rand.Rand) trial {
	t.Helper()
	timeout := faultTimeout.String()
	run, err := c.Start(Job{RanksPerHost: per, Cmd: []string{testprogBin, "mixed", strconv.Itoa(rng.IntN(1000) + 1)},
		Env: []string{"SPARCML_TIMEOUT=" + timeout, "SPARCML_INIT_TIMEOUT=" + timeout}})
	require.NoError(t, err)
	defer run.Kill()
	w := watchErrors(run)
	victim := rng.IntN(len(run.Ranks))
	if rng.IntN(2) == 1 {
		if err := run.WaitOutput(victim, "iter 0\n", time.Minute); err != nil {
			return trial{outcome: "hang", detail: "the workload did not start: " + err.Error()}
		}
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
	} else {
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
	}
	inInit := !strings.Contains(run.Ranks[victim].Stdout(), "iter ")
	killed := time.Now()
	run.Ranks[victim].Kill()
	// A hang is a survivor silent well past every bound (Init's included:
	// rank 0 waits up to 30 s more for its store's clients).
	hung := w.wait([]int{victim}, faultTimeout+50*time.Second)
	run.Kill() // every survivor has reported: no need to wait for rank 0's store
	res, _ := run.Wait(10 * time.Second)
	tr := judge(res, w.seen, []int{victim}, killed, faultTimeout+2*time.Second, hung)
	tr.inInit = inInit
	if tr.outcome == "named" && tr.detect > slowDetection {
		tr.detail = fmt.Sprintf("rank %d killed, detected after %v:\n%s", victim, tr.detect, errorLines(res[(victim+1)%len(res)].Stderr))
	}
	return tr
}

// SIGKILL of a random rank at a random moment, P = 4 and 8: every
// survivor fails within SPARCML_TIMEOUT with an error naming the victim,
// and nothing hangs.
func TestFaultKillRandomRank(t *testing.T) {
	c := shared(t)
	binaries(t)
	n := faultTrials(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d trials per job size", seed, n)
	rng := rand.New(rand.NewPCG(seed, 17))
	for _, per := range []int{1, 2} {
		p := per * sharedHosts
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			var init, ops faultStats
			for i := 0; i < n; i++ {
				if tr := killTrial(t, c, per, rng); tr.inInit {
					init.add(tr)
				} else {
					ops.add(tr)
				}
			}
			t.Log("| fault | trials | named in time | unnamed | late | hangs | survived | median detection | worst |")
			t.Log(init.row(fmt.Sprintf("kill -9 during Init, P=%d", p)))
			t.Log(ops.row(fmt.Sprintf("kill -9 during operations, P=%d", p)))
			for _, e := range append(init.examples, ops.examples...) {
				t.Log(e)
			}
			assert.Zero(t, init.hangs+ops.hangs, "hangs")
			assert.Zero(t, init.survived+ops.survived, "survivors that did not fail")
			assert.Zero(t, ops.late, "survivors of a kill during the operations failing after the deadline")
			assert.True(t, ops.n == ops.named,
				"%d of %d kills during the operations: every survivor failed in time naming the victim", ops.named, ops.n)
			assert.True(t, init.n == init.named,
				"%d of %d kills during Init: every survivor failed in time naming the victim", init.named, init.n)
		})
	}
}

// faultJob starts the mixed workload and waits until it runs.
func faultJob(t *testing.T, c *Cluster, per int, timeout time.Duration, env ...string) *Running {
	t.Helper()
	run, err := c.Start(Job{RanksPerHost: per, Cmd: []string{testprogBin, "mixed", "7"},
		Env: append([]string{"SPARCML_TIMEOUT=" + timeout.String()}, env...)})
	require.NoError(t, err)
	t.Cleanup(run.Kill)
	require.NoError(t, run.WaitOutput(0, "iter 10", time.Minute))
	return run
}

// A rank stopped with SIGSTOP for longer than the deadline makes every
// other rank fail within the deadline plus 2 s, naming it; one stopped
// for a third of the deadline makes nothing fail.
func TestFaultStoppedRank(t *testing.T) {
	c := shared(t)
	binaries(t)
	const timeout = 5 * time.Second
	const victim = 2
	t.Run("past-the-deadline", func(t *testing.T) {
		run := faultJob(t, c, 1, timeout)
		w := watchErrors(run)
		stopped := time.Now()
		require.NoError(t, run.Ranks[victim].cmd.Process.Signal(syscall.SIGSTOP))
		hung := w.wait([]int{victim}, timeout+30*time.Second)
		run.Kill()
		res, _ := run.Wait(10 * time.Second)
		tr := judge(res, w.seen, []int{victim}, stopped, timeout+2*time.Second, hung)
		t.Logf("SIGSTOP past the deadline: %s, the last survivor failed %v after the stop", tr.outcome, tr.detect.Round(time.Millisecond))
		require.NotEqual(t, "hang", tr.outcome, tr.detail)
		require.NotEqual(t, "survived", tr.outcome, tr.detail)
		assert.True(t, tr.outcome == "named", "every survivor failed within the deadline plus 2 s naming the stopped rank: %s", tr.detail)
	})
	t.Run("short-of-the-deadline", func(t *testing.T) {
		run := faultJob(t, c, 1, timeout)
		require.NoError(t, run.Ranks[victim].cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(timeout / 3)
		require.NoError(t, run.Ranks[victim].cmd.Process.Signal(syscall.SIGCONT))
		resumed := strings.Count(run.Ranks[0].Stdout(), "iter ")
		require.NoError(t, run.WaitOutput(0, fmt.Sprintf("iter %d\n", 10*(resumed+5)), time.Minute),
			"the job must go on after the rank resumes")
		for _, rk := range run.Ranks {
			select {
			case <-rk.done:
				t.Fatalf("rank %d exited after a stop short of the deadline:\n%s", rk.Rank, rk.Stderr())
			default:
			}
		}
	})
}

// A host's link going down (a partition: its packets vanish, nothing is
// reset) makes every rank of the other hosts fail within the deadline
// plus 2 s, naming a rank of that host.
func TestFaultLinkDown(t *testing.T) {
	c := shared(t)
	binaries(t)
	const timeout = 5 * time.Second
	const victim = 2
	run := faultJob(t, c, 1, timeout)
	w := watchErrors(run)
	require.NoError(t, c.LinkDown(victim))
	down := time.Now()
	defer func() { require.NoError(t, c.LinkUp(victim)) }()
	hung := w.wait([]int{victim}, timeout+30*time.Second)
	run.Kill()
	res, _ := run.Wait(10 * time.Second)
	tr := judge(res, w.seen, []int{victim}, down, timeout+2*time.Second, hung)
	t.Logf("link down: %s, the last survivor failed %v after the link went down", tr.outcome, tr.detect.Round(time.Millisecond))
	require.NotEqual(t, "hang", tr.outcome, tr.detail)
	require.NotEqual(t, "survived", tr.outcome, tr.detail)
	assert.True(t, tr.outcome == "named", "every survivor failed within the deadline plus 2 s naming the cut-off rank: %s", tr.detail)
}

// Random packet loss of 1% and 5% on every host's link, both directions:
// every result exact (--check); the time is recorded.
func TestFaultPacketLoss(t *testing.T) {
	c := shared(t)
	binaries(t)
	for _, loss := range []float64{0.01, 0.05} {
		t.Run(fmt.Sprintf("%g%%", loss*100), func(t *testing.T) {
			for h := 0; h < sharedHosts; h++ {
				require.NoError(t, c.SetLoss(h, loss))
			}
			defer func() {
				for h := 0; h < sharedHosts; h++ {
					require.NoError(t, c.SetLoss(h, 0))
				}
			}()
			for _, op := range []string{"allreduce", "sparse-allreduce"} {
				res := runOK(t, c, Job{Cmd: bench("--op", op, "--sizes", "1M")})
				for _, row := range checkRows(t, res, 1, sharedHosts) {
					t.Logf("%g%% loss, %s n=%d: median %.0f us, check %s", loss*100, op, row.N, row.TimeMedian, row.Check)
				}
			}
		})
	}
}

// After a rank is killed (SIGKILL, by itself, at a chosen operation)
// under SPARCML_ON_PEER_LOSS=revoke, the survivors on the other hosts
// shrink and run 100 more allreduces checked against the sum over the
// survivors (testprog's shrink scenario), at P = 4 and 8.
func TestFaultKillThenShrink(t *testing.T) {
	c := shared(t)
	binaries(t)
	for _, per := range []int{1, 2} {
		p := per * sharedHosts
		for _, seed := range []int{p + 1, 3 * p} { // victims 1 and 0
			victim := seed % p
			t.Run(fmt.Sprintf("P=%d/victim=%d", p, victim), func(t *testing.T) {
				run, err := c.Start(Job{RanksPerHost: per, Cmd: []string{testprogBin, "shrink", strconv.Itoa(seed)},
					Env: []string{"SPARCML_ON_PEER_LOSS=revoke", "SPARCML_TIMEOUT=" + faultTimeout.String()}})
				require.NoError(t, err)
				defer run.Kill()
				res, err := run.Wait(jobTimeout)
				require.NoError(t, err, Describe(res))
				for _, r := range res {
					if r.Rank == victim {
						assert.NotEqual(t, 0, r.ExitCode, "the victim")
						continue
					}
					require.Equal(t, 0, r.ExitCode, "rank %d\n%s", r.Rank, Describe(res))
					assert.Contains(t, r.Stdout, fmt.Sprintf("lost rank %d:", victim))
					assert.Contains(t, r.Stdout, fmt.Sprintf("of %d: 100 checked allreduces", p-1))
				}
			})
		}
	}
}
