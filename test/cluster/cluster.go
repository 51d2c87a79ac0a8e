// Package cluster runs multi-host tests and benchmarks on an emulated
// cluster: each host is a network namespace joined to a bridge by a veth
// pair whose two ends are shaped to the link rate with tbf, so a host's
// traffic is limited in both directions, as by a real NIC and switch port.
// The set-up lives in cluster.sh beside this file (the same commands people
// use by hand); this package drives it, checks the links with a throughput
// probe before anything is measured, and starts ranks on the hosts with the
// launcher's environment set, collecting every rank's output and exit
// status.
//
// Everything a cluster creates is inside its own namespaces, named after a
// random id, so two runs coexist and deleting the namespaces removes every
// link, qdisc and iptables rule. A cluster is removed by Close (New
// registers it with t.Cleanup); one whose owner died is swept by the next
// cluster's start.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Host is one emulated machine.
type Host struct {
	Index int
	NS    string   // network namespace
	Addrs []string // Addrs[k] is the address of interface ethk, on network k
}

// IfName is the name of a host's interface on network k.
func IfName(k int) string { return "eth" + strconv.Itoa(k) }

// Options describe a cluster to create.
type Options struct {
	Hosts int
	// Rates holds one tc rate ("1gbit", "100mbit") per network; network 0
	// is the one jobs use by default. Default: one network at 1gbit.
	Rates []string
	// MTU of every link; default 9000 (jumbo frames, as on the data-centre
	// Ethernet this emulates).
	MTU int
	// SkipProbe leaves out the self-check (a stream between hosts 0 and 1
	// that must come within 5% of Rates[0]).
	SkipProbe bool
	// ProbeAdvisory records the self-check's figure without failing when
	// it is off the rate: for tests of behaviour rather than speed, which
	// stay meaningful when a busy CPU slows the links.
	ProbeAdvisory bool
	// ProbeSeconds is the length of one probe stream; default 3.
	ProbeSeconds int
}

// Cluster is a running emulated cluster.
type Cluster struct {
	ID    string
	Rates []string
	MTU   int
	// ProbeMbps is the self-check's measured throughput from host 0 to
	// host 1 in Mbit/s (0 if skipped); print it with every result.
	ProbeMbps float64
	// ProbeErr is the self-check's failure when it was advisory.
	ProbeErr error

	script string
	mu     sync.Mutex
	hosts  []Host
	jobs   int
	closed bool
}

// Script is the path of cluster.sh.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "cluster.sh")
}

// Unavailable says why clusters cannot be made here (not root, no network
// namespaces), or returns nil.
func Unavailable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("emulated cluster needs root (network namespaces, tc), running as uid %d", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("emulated cluster needs iproute2's ip, not found")
	}
	name := fmt.Sprintf("sparcml-clcheck-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("network namespaces unavailable: ip netns add: %v: %s", err, bytes.TrimSpace(out))
	}
	exec.Command("ip", "netns", "del", name).Run()
	return nil
}

// Up creates a cluster, checks its links unless told not to, and returns
// it. The caller must Close it.
func Up(o Options) (*Cluster, error) {
	if o.Hosts < 1 {
		return nil, fmt.Errorf("cluster: %d hosts", o.Hosts)
	}
	if len(o.Rates) == 0 {
		o.Rates = []string{"1gbit"}
	}
	if o.MTU == 0 {
		o.MTU = 9000
	}
	if o.ProbeSeconds == 0 {
		o.ProbeSeconds = 3
	}
	for _, tool := range []string{"tc", "iperf3", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("cluster: %s not found: run `make deps-cluster` (scripts/deps.sh cluster)", tool)
		}
	}
	c := &Cluster{Rates: o.Rates, MTU: o.MTU, script: Script()}
	out, err := c.sh("up", "-n", strconv.Itoa(o.Hosts), "-r", strings.Join(o.Rates, ","),
		"-m", strconv.Itoa(o.MTU), "-o", strconv.Itoa(os.Getpid()))
	if err != nil {
		return nil, err
	}
	c.ID = strings.TrimSpace(out)
	if err := c.loadHosts(); err != nil {
		c.Close()
		return nil, err
	}
	if !o.SkipProbe && o.Hosts >= 2 {
		mbps, err := c.Probe(0, 1, o.ProbeSeconds)
		c.ProbeMbps, c.ProbeErr = mbps, err
		if err != nil && !(o.ProbeAdvisory && mbps > 0) {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// New creates a cluster of hosts at rate (plus one more network per extra
// rate) for a test, skipping the test when clusters cannot be made here
// and failing it when the set-up fails. The self-check is advisory (its
// figure and any shortfall are logged): tests of behaviour stay meaningful
// on a busy machine. t.Cleanup removes the cluster.
func New(t testing.TB, hosts int, rate string, moreRates ...string) *Cluster {
	t.Helper()
	if err := Unavailable(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	c, err := Up(Options{Hosts: hosts, Rates: append([]string{rate}, moreRates...), ProbeAdvisory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("cluster %s: %d hosts at %s, probe host 0 -> 1: %.1f Mbit/s", c.ID, hosts, rate, c.ProbeMbps)
	if c.ProbeErr != nil {
		t.Logf("warning: the links run below their rate (a busy CPU?): %v", c.ProbeErr)
	}
	return c
}

// Close kills every process on the hosts and removes the cluster.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	_, err := c.sh("down", c.ID)
	return err
}

// Hosts returns the cluster's hosts.
func (c *Cluster) Hosts() []Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Host(nil), c.hosts...)
}

// Host returns host i.
func (c *Cluster) Host(i int) Host { return c.Hosts()[i] }

// RateMbps is network k's rate in Mbit/s.
func (c *Cluster) RateMbps(k int) float64 {
	bps, err := ParseRate(c.Rates[k])
	if err != nil {
		return 0
	}
	return bps / 1e6
}

// Probe streams for seconds from host from to host to with iperf3 and
// returns the throughput in Mbit/s (the best of up to three tries); the
// error is non-nil when it is not within 5% of the rate.
func (c *Cluster) Probe(from, to, seconds int) (float64, error) {
	return c.ProbeRate(from, to, seconds, c.Rates[0])
}

// ProbeRate is Probe held against rate instead of the network's rate (for
// a host whose rate was changed).
func (c *Cluster) ProbeRate(from, to, seconds int, rate string) (float64, error) {
	out, err := c.sh("probe", c.ID, strconv.Itoa(from), strconv.Itoa(to), strconv.Itoa(seconds), rate)
	m := probeLine.FindStringSubmatch(out + " " + errText(err))
	if m == nil {
		if err == nil {
			err = fmt.Errorf("cluster: no figure in the probe's output %q", out)
		}
		return 0, err
	}
	mbps, _ := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return mbps, fmt.Errorf("cluster %s: self-check failed: %s", c.ID, strings.TrimSpace(out))
	}
	return mbps, nil
}

var probeLine = regexp.MustCompile(`: ([0-9.]+) Mbit/s of`)

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Command returns a command that runs on host: in its network namespace,
// with a hostname of its own (hN, in a UTS namespace of the command's), as
// programs that tell hosts apart by name (Open MPI's session directories,
// for one) expect.
func (c *Cluster) Command(host int, name string, args ...string) *exec.Cmd {
	pre := []string{"netns", "exec", c.Host(host).NS, "unshare", "--uts", "sh", "-c",
		`hostname "$0" && exec "$@"`, "h" + strconv.Itoa(host), name}
	return exec.Command("ip", append(pre, args...)...)
}

// Kill SIGKILLs every process on host, as a machine that crashed.
func (c *Cluster) Kill(host int) error { return c.do("kill", strconv.Itoa(host)) }

// LinkDown unplugs host's cable on network 0 at the switch: its peers'
// packets to it vanish, and no connection is reset.
func (c *Cluster) LinkDown(host int) error { return c.do("link", strconv.Itoa(host), "down") }

// LinkUp plugs host's cable back in.
func (c *Cluster) LinkUp(host int) error { return c.do("link", strconv.Itoa(host), "up") }

// SetLoss drops a random fraction p of the packets host sends and of those
// it receives on its interfaces (0 removes the loss). Packets are dropped
// where they arrive, so the sender sees loss on the wire, not a send error.
func (c *Cluster) SetLoss(host int, p float64) error {
	return c.do("loss", strconv.Itoa(host), strconv.FormatFloat(p, 'g', -1, 64))
}

// SetRate changes host's rate on network 0, in both directions.
func (c *Cluster) SetRate(host int, rate string) error {
	return c.do("shape", strconv.Itoa(host), rate)
}

// AddHost joins a new host to the bridge, shaped like the others.
func (c *Cluster) AddHost() (Host, error) {
	if _, err := c.sh("add", c.ID); err != nil {
		return Host{}, err
	}
	if err := c.loadHosts(); err != nil {
		return Host{}, err
	}
	hs := c.Hosts()
	return hs[len(hs)-1], nil
}

func (c *Cluster) do(cmd string, args ...string) error {
	_, err := c.sh(append([]string{cmd, c.ID}, args...)...)
	return err
}

// scriptTimeout bounds one cluster.sh command (the longest, a probe, makes
// at most three streams of a few seconds).
const scriptTimeout = 3 * time.Minute

// sh runs cluster.sh and returns its standard output; the error carries
// its standard error.
func (c *Cluster) sh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", scriptTimeout)
		}
		return stdout.String(), fmt.Errorf("cluster: cluster.sh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// loadHosts reads the host list from `cluster.sh info`.
func (c *Cluster) loadHosts() error {
	out, err := c.sh("info", c.ID)
	if err != nil {
		return err
	}
	var hosts []Host
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "host" {
			continue
		}
		i, err := strconv.Atoi(f[1])
		if err != nil || i != len(hosts) {
			return fmt.Errorf("cluster: bad line %q from cluster.sh info", sc.Text())
		}
		h := Host{Index: i, NS: f[2]}
		for k := 3; k+1 < len(f); k += 2 {
			h.Addrs = append(h.Addrs, f[k+1])
		}
		hosts = append(hosts, h)
	}
	c.mu.Lock()
	c.hosts = hosts
	c.mu.Unlock()
	return nil
}

// ParseRate reads a tc rate ("1gbit", "100mbit", "500kbit") in bits per
// second.
func ParseRate(s string) (float64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				break
			}
			return f * u.mult, nil
		}
	}
	return 0, fmt.Errorf("bad rate %q (want e.g. 1gbit, 100mbit)", s)
}
