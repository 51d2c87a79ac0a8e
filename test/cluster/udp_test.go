package cluster

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The loss test counts datagrams itself rather than trusting a tool's
// estimate: this test binary, started on a host with SPARCML_CLUSTER_UDP
// set, sends numbered datagrams at a pace far below the rate, or counts
// the distinct ones it receives.

const (
	udpDatagrams = 6000
	udpPerSecond = 3000
	udpSize      = 1000
)

// udpTool runs the sender or receiver; it is called from TestMain.
func udpTool(mode, addr string) int {
	switch mode {
	case "recv":
		return udpRecv(addr)
	case "send":
		return udpSend(addr)
	}
	fmt.Fprintln(os.Stderr, "unknown SPARCML_CLUSTER_UDP mode", mode)
	return 2
}

func udpRecv(addr string) int {
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	// A receive buffer large enough that the socket drops nothing.
	conn.(*net.UDPConn).SetReadBuffer(8 << 20)
	fmt.Println("listening")
	seen := make(map[uint64]bool)
	buf := make([]byte, 2*udpSize)
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < udpDatagrams && time.Now().Before(deadline) {
		// Idle 2 s after the stream began: the sender is done.
		wait := 2 * time.Second
		if len(seen) == 0 {
			wait = time.Until(deadline)
		}
		conn.SetReadDeadline(time.Now().Add(wait))
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			break
		}
		if n >= 8 {
			seen[binary.BigEndian.Uint64(buf)] = true
		}
	}
	fmt.Printf("received %d\n", len(seen))
	return 0
}

func udpSend(addr string) int {
	conn, err := net.Dial("udp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	buf := make([]byte, udpSize)
	start := time.Now()
	for i := 0; i < udpDatagrams; i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / udpPerSecond)); d > 0 {
			time.Sleep(d)
		}
		binary.BigEndian.PutUint64(buf, uint64(i))
		if _, err := conn.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "send:", err)
			return 1
		}
	}
	fmt.Printf("sent %d\n", udpDatagrams)
	return 0
}

// udpLoss sends udpDatagrams numbered datagrams from host from to host to
// and returns how many were lost and sent.
func udpLoss(t *testing.T, c *Cluster, from, to int) (lost, total int) {
	t.Helper()
	addr := net.JoinHostPort(c.Host(to).Addrs[0], "5300")
	env := []string{"SPARCML_CLUSTER_UDP_ADDR=" + addr}
	recv, err := c.StartProcess(to, append(env, "SPARCML_CLUSTER_UDP=recv"), os.Args[0])
	require.NoError(t, err)
	defer recv.Kill()
	for !strings.Contains(recv.Stdout(), "listening") {
		select {
		case <-recv.Done():
			t.Fatalf("receiver exited: %s", recv.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
	}
	send, err := c.StartProcess(from, append(env, "SPARCML_CLUSTER_UDP=send"), os.Args[0])
	require.NoError(t, err)
	for _, p := range []*Rank{send, recv} {
		select {
		case <-p.Done():
		case <-time.After(60 * time.Second):
			t.Fatal("UDP sender or receiver did not finish")
		}
		require.Equal(t, 0, p.Result().ExitCode, "stderr: %s", p.Stderr())
	}
	got := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(recv.Stdout()), "listening"))
	n, err := strconv.Atoi(strings.TrimPrefix(got, "received "))
	require.NoError(t, err, "receiver said %q", recv.Stdout())
	return udpDatagrams - n, udpDatagrams
}
