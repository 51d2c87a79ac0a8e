package cluster

// The harness's own tests: the links are shaped to the rate in both
// directions, loss is applied at the rate asked, a link taken down is seen
// down, a host can be added, and nothing a cluster made survives it,
// however its owner ends.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each direction of a host's link is shaped: with host 1 slowed to half
// the rate, a stream into it and a stream out of it both run at that rate,
// while other hosts keep the full rate.
func TestShapingBothDirections(t *testing.T) {
	c := shared(t)
	var busy []string
	judge := func(what string, mbps float64, err error, rateMbps float64) {
		t.Logf("%s: %.1f Mbit/s of %.0f", what, mbps, rateMbps)
		if err == nil {
			return
		}
		// Shaping caps the rate whatever the load; only a figure below
		// the rate can be the CPU's fault.
		if mbps > 0 && mbps < rateMbps && machineBusy() {
			busy = append(busy, fmt.Sprintf("%s %.1f Mbit/s", what, mbps))
			return
		}
		t.Errorf("%s: %v", what, err)
	}
	mbps, err := c.Probe(2, 3, 2)
	judge("host 2 -> 3", mbps, err, c.RateMbps(0))

	halfMbps := c.RateMbps(0) / 2
	half := fmt.Sprintf("%dmbit", int(halfMbps))
	require.NoError(t, c.SetRate(1, half))
	defer func() { require.NoError(t, c.SetRate(1, c.Rates[0])) }()
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		mbps, err := c.ProbeRate(dir[0], dir[1], 2, half)
		judge(fmt.Sprintf("host %d -> %d with host 1 at %s", dir[0], dir[1], half), mbps, err, halfMbps)
	}
	if len(busy) > 0 && !t.Failed() {
		t.Skipf("the machine is too busy to judge the rate (load %s on %d cores): %s", loadAvg(), runtime.NumCPU(), strings.Join(busy, "; "))
	}
}

// machineBusy says whether more tasks wait for the CPUs than there are
// CPUs, so that a stream's figure says more about the load than about the
// shaping.
func machineBusy() bool {
	l, err := strconv.ParseFloat(loadAvg(), 64)
	return err == nil && l > float64(runtime.NumCPU())
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// Loss drops the fraction asked of the packets a host receives and of those
// it sends, measured by counting UDP datagrams, and goes away when reset.
func TestLossApplied(t *testing.T) {
	c := shared(t)
	const p = 0.1
	require.NoError(t, c.SetLoss(1, p))
	defer func() { require.NoError(t, c.SetLoss(1, 0)) }()
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		lost, total := udpLoss(t, c, dir[0], dir[1])
		frac := float64(lost) / float64(total)
		// Five standard deviations of a binomial count.
		tol := 5 * math.Sqrt(p*(1-p)/float64(total))
		t.Logf("host %d -> %d with %.0f%% loss on host 1: %d of %d datagrams lost (%.2f%%)", dir[0], dir[1], p*100, lost, total, frac*100)
		assert.InDelta(t, p, frac, tol, "measured loss host %d -> %d", dir[0], dir[1])
	}
	require.NoError(t, c.SetLoss(1, 0))
	lost, total := udpLoss(t, c, 0, 1)
	assert.Less(t, float64(lost), 0.005*float64(total), "loss still applied after reset: %d of %d", lost, total)
}

// A host whose cable is pulled has no carrier and cannot be reached; once
// plugged back in it can.
func TestLinkDownDetected(t *testing.T) {
	c := shared(t)
	require.NoError(t, c.LinkDown(2))
	down := true
	defer func() {
		if down {
			c.LinkUp(2)
		}
	}()
	assert.Equal(t, "0", carrier(t, c, 2), "host 2's eth0 must lose its carrier")
	assert.False(t, reachable(c, 0, 2), "host 2 reachable with its link down")
	require.NoError(t, c.LinkUp(2))
	down = false
	ok := false
	for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); {
		ok = carrier(t, c, 2) == "1" && reachable(c, 0, 2)
	}
	assert.True(t, ok, "host 2 unreachable after its link came back")
}

func carrier(t *testing.T, c *Cluster, host int) string {
	out, err := c.Command(host, "cat", "/sys/class/net/eth0/carrier").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// reachable tries a TCP connection from host from to an iperf3 server on
// host to, with a one-second connect timeout.
func reachable(c *Cluster, from, to int) bool {
	dst := c.Host(to).Addrs[0]
	srv := c.Command(to, "iperf3", "-s", "-1", "-B", dst, "-p", "5299")
	if srv.Start() != nil {
		return false
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(200 * time.Millisecond)
	return c.Command(from, "iperf3", "-c", dst, "-p", "5299", "-n", "64K", "--connect-timeout", "1000").Run() == nil
}

// likeTheOthers says whether a probe of mbps that missed the rate by more
// than 5% still came within 5% of what two of the first hosts make now:
// then the cores, shared with whatever else runs, held both streams back
// alike, and the added host is shaped like the others.
func likeTheOthers(t *testing.T, c *Cluster, mbps float64) bool {
	ref, _ := c.Probe(0, 1, 2)
	t.Logf("host 0 -> host 1 now: %.1f Mbit/s", ref)
	return ref > 0 && mbps >= 0.95*ref
}

// A host added later is shaped like the others and joins a job with them.
func TestAddHost(t *testing.T) {
	binaries(t)
	c := New(t, 2, "1gbit")
	h, err := c.AddHost()
	require.NoError(t, err)
	require.Equal(t, 2, h.Index)
	mbps, err := c.Probe(2, 0, 2)
	t.Logf("added host 2 -> host 0: %.1f Mbit/s", mbps)
	if err != nil && !(mbps > 0 && mbps < c.RateMbps(0) && (machineBusy() || likeTheOthers(t, c, mbps))) {
		t.Errorf("the added host's link: %v", err)
	}
	res, err := c.Run(2*time.Minute, 1, sparcmlBin, "bench", "--op", "allreduce", "--sizes", "1000,1M",
		"--iters", "2", "--warmup", "1", "--check", "--format", "json")
	require.NoError(t, err, Describe(res))
	for _, r := range res {
		require.Equal(t, 0, r.ExitCode, Describe(res))
	}
	rows := benchRows(t, res[0].Stdout)
	require.Len(t, rows, 2, res[0].Stdout)
	for _, row := range rows {
		assert.Equal(t, 3, row.NP)
		assert.Equal(t, "ok", row.Check)
	}
}

// rootState is what the root namespace holds that a cluster could leave
// behind: namespaces, links, qdiscs, iptables rules.
func rootState(t *testing.T) map[string]string {
	t.Helper()
	st := map[string]string{}
	for name, cmd := range map[string][]string{
		"netns":    {"ip", "netns", "list"},
		"links":    {"ip", "-o", "link", "show"},
		"qdiscs":   {"tc", "qdisc", "show"},
		"iptables": {"iptables-save"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", cmd, out)
		st[name] = normalize(string(out))
	}
	// Clusters of other runs on the machine (which may coexist with this
	// one) come and go meanwhile; assertGone checks this cluster's own
	// namespaces by name.
	st["netns"] = dropClusterNamespaces(st["netns"])
	return st
}

func dropClusterNamespaces(list string) string {
	var keep []string
	for _, l := range strings.Split(list, "\n") {
		if !strings.HasPrefix(l, "sparcml-cl-") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// normalize drops iptables-save's comments and counters, and the link
// statistics that change between two listings.
func normalize(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		keep = append(keep, counters.ReplaceAllString(l, ""))
	}
	return strings.Join(keep, "\n")
}

// assertGone checks that nothing of cluster id is left: no namespace, no
// state, and the root namespace as it was before.
func assertGone(t *testing.T, id string, before map[string]string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "sparcml-cl-"+id, "namespaces of cluster %s left behind", id)
	_, err = os.Stat(filepath.Join(stateRoot(), id))
	assert.True(t, os.IsNotExist(err), "state of cluster %s left behind", id)
	after := rootState(t)
	for k := range before {
		assert.Equal(t, before[k], after[k], "root namespace's %s changed", k)
	}
}

// Close removes everything, also after a job that failed mid-way with
// loss set and a rank still running.
func TestCleanupAfterFailedJob(t *testing.T) {
	if err := Unavailable(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	before := rootState(t)
	c, err := Up(Options{Hosts: 3, SkipProbe: true})
	require.NoError(t, err)
	require.NoError(t, c.SetLoss(1, 0.2))
	j, err := c.Start(Job{Cmd: []string{"sh", "-c", `if [ "$SPARCML_RANK" = 1 ]; then exit 3; fi; exec sleep 600`}})
	require.NoError(t, err)
	<-j.Ranks[1].Done()
	assert.Equal(t, 3, j.Ranks[1].Result().ExitCode)
	require.NoError(t, c.Close())
	res, err := j.Wait(10 * time.Second)
	require.NoError(t, err, "ranks must die with their hosts")
	assert.Equal(t, -1, res[0].ExitCode, "rank 0 must have been killed")
	assertGone(t, c.ID, before)
}

// A test that fails after making its cluster leaves nothing behind
// (t.Cleanup), and one whose process is killed outright is swept by the
// next cluster's start.
func TestCleanupAfterFailedTest(t *testing.T) {
	if err := Unavailable(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	before := rootState(t)
	t.Run("fails", func(t *testing.T) {
		out, err := helperProcess(t, "fail").CombinedOutput()
		require.Error(t, err, "the helper test must fail: %s", out)
		id := helperID(t, string(out))
		assertGone(t, id, before)
	})
	t.Run("killed", func(t *testing.T) {
		cmd := helperProcess(t, "hang")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), "HELPER-CLUSTER ") {
			require.True(t, time.Now().Before(deadline), "helper did not make its cluster: %s", out.String())
			time.Sleep(50 * time.Millisecond)
		}
		id := helperID(t, out.String())
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		ns, _ := exec.Command("ip", "netns", "list").Output()
		require.Contains(t, string(ns), "sparcml-cl-"+id, "the killed helper's cluster must still be there before the sweep")
		swept, err := exec.Command("bash", Script(), "sweep").CombinedOutput()
		require.NoError(t, err, "%s", swept)
		assert.Contains(t, string(swept), id)
		assertGone(t, id, before)
	})
	t.Run("script-trap", func(t *testing.T) {
		// cluster.sh up -- CMD removes the cluster when CMD fails.
		cmd := exec.Command("bash", Script(), "up", "-n", "2", "--", "sh", "-c", `echo "ID $SPARCML_CLUSTER"; exit 7`)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Equal(t, 7, ee.ExitCode(), "%s", out)
		m := regexp.MustCompile(`ID ([0-9a-f]{6})`).FindStringSubmatch(string(out))
		require.NotNil(t, m, "%s", out)
		assertGone(t, m[1], before)
	})
}

func helperProcess(t *testing.T, mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCluster$", "-test.v")
	cmd.Env = append(os.Environ(), "SPARCML_CLUSTER_HELPER="+mode)
	return cmd
}

func helperID(t *testing.T, out string) string {
	m := regexp.MustCompile(`HELPER-CLUSTER ([0-9a-f]{6})`).FindStringSubmatch(out)
	require.NotNil(t, m, "helper output: %s", out)
	return m[1]
}

// TestHelperCluster is not a test: TestCleanupAfterFailedTest runs it in a
// child process that makes a cluster and then fails or hangs.
func TestHelperCluster(t *testing.T) {
	mode := os.Getenv("SPARCML_CLUSTER_HELPER")
	if mode == "" {
		t.Skip("run by TestCleanupAfterFailedTest")
	}
	c := New(t, 2, "1gbit")
	require.NoError(t, c.SetLoss(0, 0.1))
	fmt.Printf("HELPER-CLUSTER %s\n", c.ID)
	if mode == "hang" {
		time.Sleep(10 * time.Minute)
	}
	t.Fatal("failing on purpose, mid-way through a run")
}

// benchRow is what these tests read of `sparcml bench --format json`.
type benchRow struct {
	Op         string  `json:"op"`
	Algo       string  `json:"algo"`
	AlgoChosen string  `json:"algo_chosen"`
	Transport  string  `json:"transport"`
	NP         int     `json:"np"`
	N          int     `json:"n"`
	Density    float64 `json:"density"`
	Check      string  `json:"check"`
	TimeMedian float64 `json:"time_us_median"`
	BusBW      float64 `json:"busbw_gbps"`
}

func benchRows(t *testing.T, stdout string) []benchRow {
	t.Helper()
	var rows []benchRow
	for _, l := range strings.Split(stdout, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var r benchRow
		require.NoError(t, json.Unmarshal([]byte(l), &r), "%s", l)
		rows = append(rows, r)
	}
	return rows
}

// Open MPI reaches every host through the rsh agent, one rank per host,
// each host with its own hostname.
func TestMPIAcrossHosts(t *testing.T) {
	c := shared(t)
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("skipping: Open MPI not installed (make deps-mpi)")
	}
	out, err := c.MPIRun(time.Minute, 1, nil, "sh", "-c", `echo "$(hostname) $OMPI_COMM_WORLD_RANK"`)
	require.NoError(t, err, out)
	for h := 0; h < sharedHosts; h++ {
		assert.Contains(t, out, fmt.Sprintf("h%d %d\n", h, h), "rank %d must run on host %d", h, h)
	}
}
