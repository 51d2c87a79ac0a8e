package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProbeRing streams for seconds from every host to the next one at once
// (host i to host i+1 mod N, the pattern of a ring allreduce) and returns
// each stream's throughput in Mbit/s: where the CPUs, not the links, limit
// what all hosts can move together, this falls below the rate even when
// the two-host probe does not.
func (c *Cluster) ProbeRing(seconds int) ([]float64, error) {
	hosts := c.Hosts()
	if len(hosts) < 2 {
		return nil, fmt.Errorf("cluster: a ring probe needs 2 hosts")
	}
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			s.Process.Kill()
			s.Wait()
		}
	}()
	for i, h := range hosts {
		s := c.Command(i, "iperf3", "-s", "-1", "-B", h.Addrs[0])
		if err := s.Start(); err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	for i := range hosts {
		if err := c.waitListen(i, 5201, 10*time.Second); err != nil {
			return nil, err
		}
	}
	mbps := make([]float64, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := hosts[(i+1)%len(hosts)].Addrs[0]
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
			defer cancel()
			cmd := c.Command(i, "iperf3", "-c", to, "-t", strconv.Itoa(seconds), "-O", "1", "-J")
			out, err := exec.CommandContext(ctx, cmd.Args[0], cmd.Args[1:]...).Output()
			if err != nil {
				errs[i] = fmt.Errorf("cluster: ring probe host %d -> %s: %v: %s", i, to, err, out)
				return
			}
			var r struct {
				End struct {
					Received struct {
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(out, &r); err != nil || r.Error != "" || r.End.Received.BitsPerSecond == 0 {
				errs[i] = fmt.Errorf("cluster: ring probe host %d -> %s: %v %s", i, to, err, r.Error)
				return
			}
			mbps[i] = r.End.Received.BitsPerSecond / 1e6
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return mbps, err
		}
	}
	return mbps, nil
}

// waitListen waits until something listens on TCP port on host.
func (c *Cluster) waitListen(host, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.Command(host, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: nothing listens on port %d of host %d after %v", port, host, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MPIRun runs an Open MPI program with ranksPerHost ranks on every host:
// mpirun starts on host 0 and reaches the other hosts through an rsh agent
// that enters their namespaces; the TCP BTL and the daemons' connections
// are held to network 0's interface. mpiArgs go before the program (extra
// --mca settings). It returns the job's standard output.
func (c *Cluster) MPIRun(timeout time.Duration, ranksPerHost int, mpiArgs []string, prog ...string) (string, error) {
	dir, err := c.mpiFiles(ranksPerHost)
	if err != nil {
		return "", err
	}
	hosts := c.Hosts()
	args := []string{"-np", strconv.Itoa(ranksPerHost * len(hosts)),
		"--hostfile", filepath.Join(dir, "hostfile"),
		"--mca", "plm_rsh_agent", filepath.Join(dir, "agent"),
		"--mca", "btl", "tcp,self", "--mca", "pml", "ob1",
		"--mca", "btl_tcp_if_include", IfName(0), "--mca", "oob_tcp_if_include", IfName(0),
		"-x", "PMIX_MCA_gds=hash"}
	args = append(append(args, mpiArgs...), prog...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := c.Command(0, "mpirun", args...)
	cmd = exec.CommandContext(ctx, cmd.Args[0], cmd.Args[1:]...)
	// Every host shares one file system: PMIx's shared-memory store
	// would collide (gds=hash), and root must be allowed explicitly.
	cmd.Env = append(os.Environ(), "PMIX_MCA_gds=hash",
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("did not finish within %v", timeout)
		}
		return stdout.String(), fmt.Errorf("cluster: mpirun %s: %v\nstderr:\n%s", strings.Join(prog, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// mpiFiles writes the hostfile and the rsh agent for this cluster's current
// hosts into a directory of the cluster's state.
func (c *Cluster) mpiFiles(ranksPerHost int) (string, error) {
	dir := filepath.Join(stateRoot(), c.ID, "mpi")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var hostfile, cases strings.Builder
	for _, h := range c.Hosts() {
		fmt.Fprintf(&hostfile, "%s slots=%d\n", h.Addrs[0], ranksPerHost)
		fmt.Fprintf(&cases, "%s) ns=%s name=h%d ;;\n", h.Addrs[0], h.NS, h.Index)
	}
	agent := `#!/bin/sh
# rsh agent for mpirun: HOST COMMAND... runs COMMAND on the emulated HOST
# (its network namespace, its own hostname).
host=$1
shift
case $host in
` + cases.String() + `*) echo "agent: no host $host in cluster ` + c.ID + `" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$name" "$*"
`
	if err := os.WriteFile(filepath.Join(dir, "hostfile"), []byte(hostfile.String()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "agent"), []byte(agent), 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// stateRoot is where cluster.sh keeps its clusters' state.
func stateRoot() string {
	if d := os.Getenv("SPARCML_CLUSTER_STATE"); d != "" {
		return d
	}
	return "/run/sparcml-cluster"
}
