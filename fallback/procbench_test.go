package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// The two-process benchmarks run the sender in a child process (this test
// binary again, told so by the environment), so sender and receiver are
// separate processes as in a real job.
const (
	envChildMode = "FALLBACK_BENCH_CHILD" // "raw" or "p2p"
	envChildAddr = "FALLBACK_BENCH_ADDR"
	envChildSize = "FALLBACK_BENCH_SIZE"
	envChildN    = "FALLBACK_BENCH_N"
	// envChildProfile, if set in the benchmark's own environment, is a
	// file name the child writes its CPU profile to.
	envChildProfile = "FALLBACK_BENCH_CHILD_CPUPROFILE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChildMode); mode != "" {
		if err := runBenchChild(mode); err != nil {
			fmt.Fprintf(os.Stderr, "benchmark child: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild runs the sender side of a two-process benchmark.
func startChild(b *testing.B, mode, addr string, size int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildMode+"="+mode, envChildAddr+"="+addr,
		envChildSize+"="+strconv.Itoa(size), envChildN+"="+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd
}

// childConn starts the benchmark's child in mode and returns the plain
// connection it dials back, with a deadline so that a hang fails.
func childConn(b *testing.B, mode string, size int) (net.Conn, *exec.Cmd) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cmd := startChild(b, mode, ln.Addr().String(), size)
	nc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Minute)) // a hang fails
	return nc, cmd
}

func runBenchChild(mode string) error {
	addr := os.Getenv(envChildAddr)
	size, err := strconv.Atoi(os.Getenv(envChildSize))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(envChildN))
	if err != nil {
		return err
	}
	src := touched(size)
	if path := os.Getenv(envChildProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	switch mode {
	case "raw":
		nc, err := dialParent(addr)
		if err != nil {
			return err
		}
		defer nc.Close()
		if err := setBuffers(nc.(*net.TCPConn)); err != nil {
			return err
		}
		for range n {
			if _, err := nc.Write(src); err != nil {
				return err
			}
		}
		_, err = nc.Read(make([]byte, 1)) // wait until the parent has read everything
		return err
	case "pingpong":
		nc, err := dialParent(addr)
		if err != nil {
			return err
		}
		defer nc.Close()
		ack := make([]byte, 1)
		for range n {
			if _, err := nc.Write(src); err != nil {
				return err
			}
			if _, err := io.ReadFull(nc, ack); err != nil {
				return err
			}
		}
		return nil
	case "p2p":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tr, err := New(ctx, Config{Rank: 1, Size: 2, Store: childStore(addr), Token: testToken})
		if err != nil {
			return err
		}
		defer tr.Close()
		if err := tr.Recv(0, goTag, testDesc, nil).Wait(ctx); err != nil {
			return err
		}
		window := benchWindow(size)
		sends := make([]*transport.Request, window)
		for i := range n {
			slot := i % window
			if i >= window {
				if err := sends[slot].Wait(ctx); err != nil {
					return err
				}
			}
			sends[slot] = tr.Send(0, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, src)
		}
		for _, s := range sends {
			if s != nil {
				if err := s.Wait(ctx); err != nil {
					return err
				}
			}
		}
		return tr.Recv(0, doneTag, testDesc, nil).Wait(ctx)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

var (
	goTag   = transport.Tag{Comm: 2, Seq: 1}
	doneTag = transport.Tag{Comm: 2, Seq: 2}
)

// childStore is the child's view of the store: rank 0's address.
type childStore string

func (s childStore) Set(ctx context.Context, key string, value []byte) error { return nil }
func (s childStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key != addrKey(0) {
		return nil, errors.New("childStore: only knows rank 0")
	}
	return []byte(s), nil
}
func (s childStore) Close() error { return nil }

// parentStore starts the child once rank 0 publishes its address.
type parentStore struct{ onAddr func(addr string) }

func (s parentStore) Set(ctx context.Context, key string, value []byte) error {
	s.onAddr(string(value))
	return nil
}
func (s parentStore) Get(ctx context.Context, key string) ([]byte, error) {
	return nil, errors.New("parentStore: rank 0 looks nothing up")
}
func (s parentStore) Close() error { return nil }

// setBuffers leaves a plain socket as Go makes it (kernel autotuning),
// which is also the transport's default.
func setBuffers(tc *net.TCPConn) error { return nil }

// BenchmarkRawTCPProcesses: a plain Go TCP stream from a child process,
// one Write and one io.ReadFull per message, into benchWindow rotating
// buffers like BenchmarkP2PProcesses.
func BenchmarkRawTCPProcesses(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			dsts := make([][]byte, benchWindow(size))
			for i := range dsts {
				dsts[i] = touched(size)
			}
			nc, cmd := childConn(b, "raw", size)
			if err := setBuffers(nc.(*net.TCPConn)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			cpu := processCPU()
			for i := range b.N {
				if _, err := io.ReadFull(nc, dsts[i%len(dsts)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu = processCPU() - cpu
			nc.Write([]byte{1})
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			reportProcessesCPU(b, cpu, cmd, size)
		})
	}
}

// BenchmarkP2PProcesses: the TCP transport between this process (rank 0,
// receiving into posted buffers) and a child process (rank 1, sending with
// benchWindow(size) messages in flight).
func BenchmarkP2PProcesses(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var cmd *exec.Cmd
			store := parentStore{onAddr: func(addr string) { cmd = startChild(b, "p2p", addr, size) }}
			tr, err := New(ctx, Config{Rank: 0, Size: 2, Store: store, Token: testToken})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			window := benchWindow(size)
			bufs := make([][]byte, window)
			for i := range bufs {
				bufs[i] = touched(size)
			}
			recvs := make([]*transport.Request, window)
			post := func(i int) {
				recvs[i%window] = tr.Recv(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, bufs[i%window])
			}
			for i := 0; i < min(b.N, window); i++ {
				post(i)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			cpu := processCPU()
			if err := tr.Send(1, goTag, testDesc, nil).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if err := recvs[i%window].Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if next := i + window; next < b.N {
					post(next)
				}
			}
			b.StopTimer()
			cpu = processCPU() - cpu
			if err := tr.Send(1, doneTag, testDesc, nil).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			reportProcessesCPU(b, cpu, cmd, size)
		})
	}
}

// reportProcessesCPU adds the CPU time per GB of both processes: the
// receiver's during the timed loop and the whole sender child's (whose
// setup, the same in both benchmarks, is small next to the transfer).
func reportProcessesCPU(b *testing.B, parent time.Duration, cmd *exec.Cmd, size int) {
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	b.ReportMetric((parent+child).Seconds()/(float64(b.N)*float64(size)/1e9), "cpu-s/GB")
}

// BenchmarkHandoffPingPong measures what one goroutine hand-off per message
// costs, with no transport involved: a child process sends 64 KiB over a
// plain socket and waits for a one-byte acknowledgement; this process
// reads the message and acknowledges it either in one goroutine (direct)
// or, as a reader goroutine serving a waiting caller would, reads it in
// one goroutine and acknowledges from another woken through a channel
// (handoff). The difference is why the TCP transport lets a waiting
// caller read its connection itself (readshare.go). ns/op is one round
// trip.
func BenchmarkHandoffPingPong(b *testing.B) {
	const size = 64 << 10
	for _, mode := range []string{"direct", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			nc, cmd := childConn(b, "pingpong", size)
			buf, ack := make([]byte, size), []byte{1}
			// The time from one acknowledgement to the next is a round
			// trip; its median is reported next to the mean, which the
			// machine's bursts of noise dominate.
			rtt := make([]time.Duration, 0, b.N)
			last := time.Now()
			acked := func() {
				now := time.Now()
				rtt = append(rtt, now.Sub(last))
				last = now
			}
			b.SetBytes(size)
			b.ResetTimer()
			if mode == "direct" {
				for range b.N {
					if _, err := io.ReadFull(nc, buf); err != nil {
						b.Fatal(err)
					}
					if _, err := nc.Write(ack); err != nil {
						b.Fatal(err)
					}
					acked()
				}
			} else {
				arrived := make(chan error)
				go func() {
					for range b.N {
						_, err := io.ReadFull(nc, buf)
						arrived <- err
					}
				}()
				for range b.N {
					if err := <-arrived; err != nil {
						b.Fatal(err)
					}
					if _, err := nc.Write(ack); err != nil {
						b.Fatal(err)
					}
					acked()
				}
			}
			b.StopTimer()
			if len(rtt) > 1 {
				rtt = rtt[1:] // the first includes the child's start
				slices.Sort(rtt)
				b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/1e3, "median-us")
			}
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// dialParent connects a plain socket to the parent's benchmark, with a
// deadline so that a lost parent cannot leave the child hanging.
func dialParent(addr string) (net.Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(5 * time.Minute))
	return nc, nil
}
