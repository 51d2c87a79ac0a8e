package cluster

// The runtime across emulated hosts: every collective and algorithm checked
// against the reference, interface choice, a host that dies, a host whose
// link goes down, a stranger with the wrong token. Every job has a deadline
// so that a hang fails the test instead of stalling it.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jobTimeout bounds every job that is meant to finish.
const jobTimeout = 2 * time.Minute

// runOK runs a job and requires every rank to exit 0.
func runOK(t *testing.T, c *Cluster, j Job) []Result {
	t.Helper()
	run, err := c.Start(j)
	require.NoError(t, err)
	res, err := run.Wait(jobTimeout)
	require.NoError(t, err, Describe(res))
	for _, r := range res {
		require.Equal(t, 0, r.ExitCode, "rank %d failed (probe %.1f Mbit/s)\n%s", r.Rank, c.ProbeMbps, Describe(res))
	}
	return res
}

// checkRows requires rank 0's bench output to hold want rows, every one
// checked ok on np ranks.
func checkRows(t *testing.T, res []Result, want, np int) []benchRow {
	t.Helper()
	rows := benchRows(t, res[0].Stdout)
	require.Len(t, rows, want, "rank 0's output:\n%s", res[0].Stdout)
	for _, row := range rows {
		assert.Equal(t, np, row.NP)
		assert.Equal(t, "ok", row.Check, "%+v", row)
	}
	return rows
}

func bench(args ...string) []string {
	return append([]string{sparcmlBin, "bench", "--format", "json", "--check", "--iters", "2", "--warmup", "1"}, args...)
}

// Dense allreduce with every algorithm, one rank per host and two, float32
// and float64, and over a lossy link.
func TestDenseAcrossHosts(t *testing.T) {
	c := shared(t)
	binaries(t)
	sizes := "1,1000,64K,1M"
	for _, algo := range []string{"ring", "rabenseifner", "recursive-doubling", "auto"} {
		t.Run(algo, func(t *testing.T) {
			res := runOK(t, c, Job{Cmd: bench("--op", "allreduce", "--algo", algo, "--sizes", sizes)})
			rows := checkRows(t, res, 4, sharedHosts)
			t.Logf("%s n=1M: %.0f us, busbw %.3f GB/s (probe %.1f Mbit/s)", algo, rows[3].TimeMedian, rows[3].BusBW, c.ProbeMbps)
		})
	}
	t.Run("2-ranks-per-host-float64", func(t *testing.T) {
		res := runOK(t, c, Job{RanksPerHost: 2, Cmd: bench("--op", "allreduce", "--dtype", "float64", "--sizes", sizes)})
		checkRows(t, res, 4, 2*sharedHosts)
	})
	t.Run("1%-loss", func(t *testing.T) {
		require.NoError(t, c.SetLoss(1, 0.01))
		defer func() { require.NoError(t, c.SetLoss(1, 0)) }()
		res := runOK(t, c, Job{Cmd: bench("--op", "allreduce", "--algo", "ring", "--sizes", "1M")})
		checkRows(t, res, 1, sharedHosts)
	})
	t.Run("other-collectives", func(t *testing.T) {
		for _, op := range []string{"reduce-scatter", "allgather", "broadcast"} {
			res := runOK(t, c, Job{Cmd: bench("--op", op, "--sizes", "1000,1M")})
			checkRows(t, res, 2, sharedHosts)
		}
	})
}

// Sparse allreduce with every algorithm, uniform and power-law supports,
// exact and q4 values; auto-tensor is auto whose calls reuse the first
// one's decision (sparcml.WithTensor).
func TestSparseAcrossHosts(t *testing.T) {
	c := shared(t)
	binaries(t)
	for _, dist := range []string{"uniform", "powerlaw"} {
		for _, algo := range []string{"ssar-rd", "ssar-split", "dsar", "allgather", "auto", "auto-tensor"} {
			t.Run(dist+"/"+algo, func(t *testing.T) {
				res := runOK(t, c, Job{Cmd: bench("--op", "sparse-allreduce", "--algo", algo, "--dist", dist,
					"--sizes", "1M", "--density", "0.001,0.01,0.1")})
				rows := checkRows(t, res, 3, sharedHosts)
				if algo == "auto" || algo == "auto-tensor" {
					for _, r := range rows {
						t.Logf("auto at %g: %s", r.Density, r.AlgoChosen)
					}
				}
			})
		}
	}
	t.Run("q4", func(t *testing.T) {
		res := runOK(t, c, Job{RanksPerHost: 2, Cmd: bench("--op", "sparse-allreduce", "--quant", "q4",
			"--sizes", "1M", "--density", "0.01,0.1")})
		checkRows(t, res, 2, 2*sharedHosts)
	})
}

// Every collective of the public API with random lengths (test/testprog's
// collectives scenario), two ranks per host so that connections within a
// host and between hosts are both used.
func TestEveryCollectiveAcrossHosts(t *testing.T) {
	c := shared(t)
	binaries(t)
	seed := strconv.Itoa(rand.IntN(1000))
	res := runOK(t, c, Job{RanksPerHost: 2, Cmd: []string{testprogBin, "collectives", seed}})
	for _, r := range res {
		assert.Contains(t, r.Stdout, fmt.Sprintf("rank %d: collectives ok", r.Rank), "seed %s", seed)
	}
}

// txBytes reads the bytes host has sent on interface ifname.
func txBytes(t *testing.T, c *Cluster, host int, ifname string) int64 {
	t.Helper()
	out, err := c.Command(host, "cat", "/sys/class/net/"+ifname+"/statistics/tx_bytes").Output()
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err)
	return n
}

// Each host has a data network (eth0) and a slower management network
// (eth1), and the rendezvous address is on the management network. The
// interface the runtime chose must be the one in its log line, and the one
// the data crossed (the interfaces' byte counters say).
func TestInterfaceChoice(t *testing.T) {
	c := shared(t)
	binaries(t)
	// One ring allreduce of n float32 sends 2(P-1)/P * 4n bytes per rank.
	const n = 1 << 20
	perIter := int64(2 * (sharedHosts - 1) * 4 * n / sharedHosts)
	const iters = 3 // --iters 2 --warmup 1
	cases := []struct {
		name, ifname string
		data         int // network the data must cross
	}{
		{"SPARCML_IFNAME=eth0", "eth0", 0},
		{"SPARCML_IFNAME=eth", "eth", 0}, // a prefix, as NCCL_SOCKET_IFNAME
		{"route-to-rendezvous", "-", 1},  // unset: the interface that reaches rank 0's host
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := make([][2]int64, sharedHosts)
			for h := range before {
				before[h] = [2]int64{txBytes(t, c, h, "eth0"), txBytes(t, c, h, "eth1")}
			}
			res := runOK(t, c, Job{AddrNet: 1, IfName: tc.ifname, Env: []string{"SPARCML_DEBUG=INFO"},
				Cmd: bench("--op", "allreduce", "--algo", "ring", "--sizes", strconv.Itoa(n))})
			checkRows(t, res, 1, sharedHosts)
			for _, r := range res {
				h := c.Host(r.Host)
				chosen := IfName(tc.data)
				want := fmt.Sprintf("interface %s (%s)", chosen, h.Addrs[tc.data])
				assert.Contains(t, r.Stderr, want, "rank %d must log the interface it chose", r.Rank)
				sent := [2]int64{txBytes(t, c, r.Host, "eth0") - before[r.Host][0], txBytes(t, c, r.Host, "eth1") - before[r.Host][1]}
				assert.GreaterOrEqual(t, sent[tc.data], iters*perIter, "rank %d: bytes on %s (eth0, eth1 sent %v)", r.Rank, chosen, sent)
				assert.Less(t, sent[1-tc.data], perIter/10, "rank %d: data on the other network (eth0, eth1 sent %v)", r.Rank, sent)
			}
		})
	}
	t.Run("no-such-interface", func(t *testing.T) {
		run, err := c.Start(Job{IfName: "ib", Env: []string{"SPARCML_INIT_TIMEOUT=20s"}, Cmd: []string{testprogBin, "empty"}})
		require.NoError(t, err)
		res, err := run.Wait(jobTimeout)
		require.NoError(t, err, Describe(res))
		for _, r := range res {
			assert.NotEqual(t, 0, r.ExitCode, "rank %d", r.Rank)
		}
		// The ranks fail to pick an interface; some may fail first on
		// hearing that another left.
		var named int
		for _, r := range res {
			if strings.Contains(r.Stderr, `"ib"`) && strings.Contains(r.Stderr, "SPARCML_IFNAME") && strings.Contains(r.Stderr, "eth0") {
				named++
			}
		}
		assert.Equal(t, len(res), named, "every rank must say that SPARCML_IFNAME=ib matches no interface and list the available ones\n%s", Describe(res))
	})
}

// loopJob starts testprog's loop scenario (allreduces until one fails) and
// waits until it is running.
func loopJob(t *testing.T, c *Cluster, ranksPerHost int, timeout time.Duration) *Running {
	t.Helper()
	run, err := c.Start(Job{RanksPerHost: ranksPerHost, Env: []string{"SPARCML_TIMEOUT=" + timeout.String()},
		Cmd: []string{testprogBin, "loop"}})
	require.NoError(t, err)
	t.Cleanup(run.Kill)
	require.NoError(t, run.WaitOutput(0, "iter 5", time.Minute))
	return run
}

// namesAny says whether msg names one of ranks.
func namesAny(msg string, ranks []int) bool {
	for _, r := range ranks {
		if regexp.MustCompile(fmt.Sprintf(`\brank %d\b`, r)).MatchString(msg) {
			return true
		}
	}
	return false
}

// killHost runs allreduces across the hosts (per ranks per host), kills
// the processes of host victim mid-run and returns every rank's result, the
// ranks of the victim, and how long the survivors took to fail.
func killHost(t *testing.T, c *Cluster, per, victim int, opTimeout time.Duration) ([]Result, []int, time.Duration) {
	t.Helper()
	run := loopJob(t, c, per, opTimeout)
	killed := time.Now()
	require.NoError(t, c.Kill(victim))
	res, err := run.Wait(opTimeout + 30*time.Second)
	require.NoError(t, err, Describe(res))
	var dead []int
	for _, r := range res {
		if r.Host == victim {
			dead = append(dead, r.Rank)
		}
	}
	return res, dead, time.Since(killed)
}

// A host that dies mid-run (its processes killed: the kernel closes their
// connections) makes every rank on the other hosts fail with a
// collective's error, well before the operation deadline.
func TestHostKilledMidRun(t *testing.T) {
	c := shared(t)
	binaries(t)
	const opTimeout = time.Minute
	const victim = 2
	for _, per := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-ranks-per-host", per), func(t *testing.T) {
			res, dead, elapsed := killHost(t, c, per, victim, opTimeout)
			for _, r := range res {
				if r.Host == victim {
					continue
				}
				assert.Equal(t, 3, r.ExitCode, "rank %d must fail with a collective's error\n%s", r.Rank, r.Stderr)
				if !namesAny(r.Stderr, dead) {
					t.Logf("rank %d does not name a rank of host %d %v (TestHostKilledNamed):\n%s", r.Rank, victim, dead, r.Stderr)
				}
			}
			t.Logf("survivors failed %v after the kill", elapsed.Round(time.Millisecond))
			assert.Less(t, elapsed, opTimeout, "failure must come from the lost connections, not the deadline")
		})
	}
}

// Every survivor of a host's death names it, five times over, with
// allreduces of 1M floats in flight: a survivor that closed with a peer's
// data unread used to reset that connection before its goodbye left, and
// only some runs met that race (fallback/linger.go).
func TestHostKilledNamed(t *testing.T) {
	c := shared(t)
	binaries(t)
	const victim = 2
	for i := 0; i < 5; i++ {
		res, dead, _ := killHost(t, c, 1, victim, time.Minute)
		for _, r := range res {
			if r.Host != victim {
				assert.True(t, namesAny(r.Stderr, dead), "run %d: rank %d must name a rank of host %d %v:\n%s", i, r.Rank, victim, dead, r.Stderr)
			}
		}
	}
}

// linkDown runs allreduces across the hosts with SPARCML_TIMEOUT=opTimeout,
// takes victim's link down, and returns every rank's result and how long
// after the link went down each one exited. Ranks still running after
// waitFor are a hang.
func linkDown(t *testing.T, c *Cluster, victim int, opTimeout, waitFor time.Duration) ([]Result, []time.Duration) {
	t.Helper()
	run := loopJob(t, c, 1, opTimeout)
	require.NoError(t, c.LinkDown(victim))
	defer func() { require.NoError(t, c.LinkUp(victim)) }()
	down := time.Now()
	res, err := run.Wait(waitFor)
	require.NoError(t, err, "with SPARCML_TIMEOUT=%v every rank must exit\n%s", opTimeout, Describe(res))
	after := make([]time.Duration, len(res))
	for i, rk := range run.Ranks {
		after[i] = rk.start.Add(res[i].Elapsed).Sub(down)
	}
	t.Logf("ranks exited %v after the link went down", after)
	return res, after
}

// A host whose link goes down (no reset, no FIN: its packets vanish)
// makes every rank fail with a collective's error: nothing hangs.
func TestHostLinkDownNoHang(t *testing.T) {
	c := shared(t)
	binaries(t)
	const opTimeout = 5 * time.Second
	const victim = 2
	// Rank 0 may wait for the lost rank's goodbye to its store (at most
	// 30 s) before it exits.
	res, _ := linkDown(t, c, victim, opTimeout, opTimeout+45*time.Second)
	for _, r := range res {
		assert.Equal(t, 3, r.ExitCode, "rank %d must fail with a collective's error\n%s", r.Rank, r.Stderr)
	}
}

// The requirement for a link that goes down: every rank on the
// other hosts fails within its deadline (plus the time to hear of
// another's failure) and names the host that was cut off.
func TestHostLinkDownNamed(t *testing.T) {
	c := shared(t)
	binaries(t)
	const opTimeout = 5 * time.Second
	const victim = 2
	res, after := linkDown(t, c, victim, opTimeout, opTimeout+45*time.Second)
	for i, r := range res {
		if r.Host == victim {
			continue
		}
		assert.Less(t, after[i], 3*opTimeout, "rank %d must exit within its deadline", r.Rank)
		assert.True(t, namesAny(r.Stderr, []int{victim}), "rank %d must name rank %d, whose link is down:\n%s", r.Rank, victim, r.Stderr)
	}
}

// A process on another host posing as rank 1 with the wrong token is
// refused by rank 0's store, and the job then runs on every host.
func TestWrongTokenRefused(t *testing.T) {
	c := shared(t)
	binaries(t)
	const size = sharedHosts
	token := "right-token-" + strconv.Itoa(os.Getpid())
	addr := fmt.Sprintf("%s:%d", c.Host(0).Addrs[0], 29400)
	env := func(r int, tok string) []string {
		return append(LauncherEnv(r, size, 0, 1, addr, tok, IfName(0)), "SPARCML_INIT_TIMEOUT=10s", "SPARCML_TIMEOUT=60s")
	}
	job := &Running{}
	start := func(r, host int) {
		rk, err := c.StartProcess(host, env(r, token), testprogBin, "collectives", "3")
		require.NoError(t, err)
		rk.Rank = r
		job.Ranks = append(job.Ranks, rk)
	}
	t.Cleanup(job.Kill)
	start(0, 0)
	intruder, err := c.StartProcess(3, env(1, "wrong-token"), testprogBin, "empty")
	require.NoError(t, err)
	select {
	case <-intruder.Done():
	case <-time.After(time.Minute):
		intruder.Kill()
		t.Fatal("the intruder hung")
	}
	ir := intruder.Result()
	assert.Equal(t, 4, ir.ExitCode, "the intruder must fail to join: %s", ir.Stderr)
	assert.Contains(t, strings.ToLower(ir.Stderr), "auth", "the intruder's error: %s", ir.Stderr)
	for r := 1; r < size; r++ {
		start(r, r)
	}
	res, err := job.Wait(jobTimeout)
	require.NoError(t, err, Describe(res))
	for _, r := range res {
		assert.Equal(t, 0, r.ExitCode, "rank %d\n%s", r.Rank, Describe(res))
	}
}
