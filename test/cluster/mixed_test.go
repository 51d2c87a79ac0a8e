package cluster

// Mixed jobs: several ranks on each of several emulated hosts, so that the
// default transport choice (auto) reaches the ranks of a host through
// shared memory and the others over TCP; the cost model's calibration pair
// then crosses the network.

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mixedJob is 2 hosts x 2 ranks: ranks 0 and 1 on host 0, 2 and 3 on host 1.
func mixedJob(cmd []string, env ...string) Job {
	return Job{Hosts: []int{0, 1}, RanksPerHost: 2, Cmd: cmd,
		Env: append([]string{"SPARCML_DEBUG=INFO", "SPARCML_DEBUG_SUBSYS=init"}, env...)}
}

// Every rank of a mixed job reaches its host's other rank through shared
// memory and the other host's over TCP (its INFO line says so), every
// collective is checked against the reference, and the cost model was
// measured between ranks on different hosts.
func TestMixedJobTransports(t *testing.T) {
	c := shared(t)
	binaries(t)
	for _, op := range []string{"allreduce", "reduce-scatter", "allgather", "broadcast", "sparse-allreduce", "sparse-allgather"} {
		t.Run(op, func(t *testing.T) {
			res := runOK(t, c, mixedJob(bench("--op", op, "--sizes", "1000,1M")))
			for _, row := range checkRows(t, res, 2, 4) {
				assert.Equal(t, "shm+tcp", row.Transport, "%+v", row)
			}
			checkRoutes(t, res)
			checkCalibrationPair(t, res)
		})
	}
	// The hierarchical algorithms on the two levels of the job: within a
	// host over shared memory, across over TCP.
	for _, op := range []string{"allreduce", "reduce-scatter", "allgather", "broadcast", "sparse-allreduce"} {
		t.Run(op+"-hierarchical", func(t *testing.T) {
			res := runOK(t, c, mixedJob(bench("--op", op, "--algo", "hierarchical", "--sizes", "1000,1M")))
			for _, row := range checkRows(t, res, 2, 4) {
				assert.Equal(t, "hierarchical", row.Algo, "%+v", row)
			}
		})
	}
	t.Run("testprog-collectives", func(t *testing.T) {
		seed := strconv.Itoa(rand.IntN(1000))
		res := runOK(t, c, mixedJob([]string{testprogBin, "collectives", seed}))
		for _, r := range res {
			assert.Contains(t, r.Stdout, fmt.Sprintf("rank %d: collectives ok", r.Rank), "seed %s", seed)
		}
		checkRoutes(t, res)
	})
}

// checkRoutes requires each rank's INFO line to name shm to its host's
// other rank and tcp to the other host's two.
func checkRoutes(t *testing.T, res []Result) {
	t.Helper()
	require.Len(t, res, 4)
	for _, r := range res {
		mate := r.Rank ^ 1
		other := 2 - 2*(r.Rank/2) // the other host's first rank
		want := fmt.Sprintf("INFO init: transport shm to rank %d, tcp to ranks %d-%d", mate, other, other+1)
		assert.Contains(t, r.Stderr, want, "rank %d on host %d", r.Rank, r.Host)
	}
}

var calibrationLine = regexp.MustCompile(`cost model: .*measured at start-up between ranks 0 and (\d+), hosts (\d+) and (\d+)\)`)

// checkCalibrationPair requires rank 0's log to say the model was
// measured between rank 0 and a rank the harness put on another host.
func checkCalibrationPair(t *testing.T, res []Result) {
	t.Helper()
	m := calibrationLine.FindStringSubmatch(res[0].Stderr)
	require.NotNil(t, m, "rank 0 does not say where the cost model was measured:\n%s", res[0].Stderr)
	peer, _ := strconv.Atoi(m[1])
	require.Less(t, peer, len(res))
	assert.NotEqual(t, res[0].Host, res[peer].Host, "calibration between rank 0 and rank %d, both on emulated host %d", peer, res[0].Host)
	assert.Contains(t, res[0].Stderr, "cost model within host 0 (ranks 0 and 1): alpha", "the figures within a host")
}

// A rank killed in a mixed job: its host's other rank (which reached it
// through shared memory) and the other host's ranks (over TCP) all fail
// with a collective's error naming it, well before the deadline.
func TestMixedJobKilledRank(t *testing.T) {
	c := shared(t)
	binaries(t)
	const opTimeout = time.Minute
	for _, victim := range []int{1, 2} {
		t.Run(fmt.Sprintf("rank-%d", victim), func(t *testing.T) {
			run, err := c.Start(mixedJob([]string{testprogBin, "loop"}, "SPARCML_TIMEOUT="+opTimeout.String()))
			require.NoError(t, err)
			t.Cleanup(run.Kill)
			require.NoError(t, run.WaitOutput(0, "iter 5", time.Minute))
			killed := time.Now()
			run.Ranks[victim].Kill()
			res, err := run.Wait(opTimeout + 30*time.Second)
			require.NoError(t, err, Describe(res))
			elapsed := time.Since(killed)
			for _, r := range res {
				if r.Rank == victim {
					continue
				}
				assert.Equal(t, 3, r.ExitCode, "rank %d must fail with a collective's error\n%s", r.Rank, r.Stderr)
				errLine := regexp.MustCompile(`(?m)^ERR: .*$`).FindString(r.Stderr)
				assert.True(t, namesAny(errLine, []int{victim}), "rank %d's error must name rank %d:\n%s", r.Rank, victim, r.Stderr)
			}
			assert.Less(t, elapsed, opTimeout, "failure must come from the lost peer, not the deadline")
			t.Logf("survivors failed %v after the kill; rank 0: %s", elapsed.Round(time.Millisecond),
				regexp.MustCompile(`(?m)^ERR: .*$`).FindString(res[0].Stderr))
		})
	}
}

// SPARCML_TRANSPORT=shm on two hosts: every rank's Init fails, naming the
// hosts and their ranks, and nothing hangs.
func TestMixedJobShmRefused(t *testing.T) {
	c := shared(t)
	binaries(t)
	run, err := c.Start(mixedJob([]string{testprogBin, "empty"}, "SPARCML_TRANSPORT=shm"))
	require.NoError(t, err)
	t.Cleanup(run.Kill)
	res, err := run.Wait(jobTimeout)
	require.NoError(t, err, Describe(res))
	for _, r := range res {
		assert.Equal(t, 4, r.ExitCode, "rank %d: Init must fail\n%s", r.Rank, r.Stderr)
		assert.Contains(t, r.Stderr, "SPARCML_TRANSPORT=shm needs every rank on one host, but the job runs on 2: host 0: ranks 0-1; host 1: ranks 2-3", "rank %d", r.Rank)
	}
}
