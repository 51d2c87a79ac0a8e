//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/fallback"
	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// The two-process benchmarks: this process is rank 0 (it serves the
// store and measures), a child process is rank 1. Compare variants from
// the same run (-count 6 alternates nothing: run the pair of benchmarks
// together, as docs/PERFORMANCE.md's commands do).
const (
	envBenchMode = "SHM_BENCH_MODE" // p2p, raw, pingpong-shm, pingpong-tcp
	envBenchSize = "SHM_BENCH_SIZE"
	envBenchN    = "SHM_BENCH_N"
)

var (
	largeSizes = []int{1 << 20, 4 << 20, 16 << 20, 64 << 20}
	smallSizes = []int{8, 1 << 10, 16 << 10}
	benchGo    = transport.Tag{Comm: 2, Seq: 1}
	benchDone  = transport.Tag{Comm: 2, Seq: 2}
)

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// touched is a buffer whose pages are all mapped.
func touched(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = byte(i)
	}
	return b
}

// window is how many large messages are in flight: enough that the
// receiver always has the next one announced while it copies.
func window(size int) int { return max(2, min(8, (64<<20)/size)) }

// startBench serves the store as rank 0 and starts the child as rank 1.
func startBench(b *testing.B, mode string, size int) (context.Context, bootstrap.Store, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	addr := freeAddr(b)
	cmd := newChild(mode, addr, size, b.N)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	st, err := bootstrap.Connect(ctx, bootstrap.Env{Rank: 0, Size: 2, Addr: addr, Token: testToken}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ctx, st, func() {
		if err := cmd.Wait(); err != nil {
			b.Errorf("child: %v", err)
		}
		st.Close()
		cancel()
	}
}

// newChild is rank 1 of a benchmark in mode.
func newChild(mode, addr string, size, n int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=bench", envChildRank+"=1", envChildAddr+"="+addr,
		envBenchMode+"="+mode, envBenchSize+"="+strconv.Itoa(size), envBenchN+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	return cmd
}

// BenchmarkP2P: rank 1 sends messages of 1-64 MiB to rank 0, window(size)
// in flight, rank 0 receiving into posted buffers: each message is read
// once, straight from rank 1's buffer into rank 0's (single copy).
func BenchmarkP2P(b *testing.B) { benchP2P(b, "p2p") }

// BenchmarkP2PRings is BenchmarkP2P with every message copied through
// the ring (NoSingleCopy): the path where the kernel refuses
// cross-process reads.
func BenchmarkP2PRings(b *testing.B) { benchP2P(b, "p2p-rings") }

func benchP2P(b *testing.B, mode string) {
	for _, size := range largeSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			ctx, st, done := startBench(b, mode, size)
			defer done()
			cfg := benchConfig(0, st)
			cfg.NoSingleCopy = mode == "p2p-rings"
			tr, err := New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			if tr.SingleCopy(1) == cfg.NoSingleCopy {
				b.Fatalf("single copy %v, want %v", tr.SingleCopy(1), !cfg.NoSingleCopy)
			}
			w := window(size)
			bufs := make([][]byte, w)
			for i := range bufs {
				bufs[i] = touched(size)
			}
			recvs := make([]*transport.Request, w)
			post := func(i int) {
				recvs[i%w] = tr.Recv(1, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, bufs[i%w])
			}
			for i := range min(b.N, w) {
				post(i)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			if err := tr.Send(1, benchGo, testDesc, nil).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if err := recvs[i%w].Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if next := i + w; next < b.N {
					post(next)
				}
			}
			b.StopTimer()
			if err := tr.Send(1, benchDone, testDesc, nil).Wait(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRawReadv is the bound BenchmarkP2P is measured against: the
// same process_vm_readv of each size from the child's buffers, with no
// protocol around it, rotating through as many source and destination
// buffers as BenchmarkP2P has in flight (so that both find the same
// buffers in the caches).
func BenchmarkRawReadv(b *testing.B) {
	for _, size := range largeSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			ctx, st, done := startBench(b, "raw", size)
			defer done()
			v, err := st.Get(ctx, "bench/buf")
			if err != nil {
				b.Fatal(err)
			}
			w := window(size)
			var pid int
			addrs := make([]uint64, w)
			fields := strings.Fields(string(v))
			pid, _ = strconv.Atoi(fields[0])
			for i := range addrs {
				addrs[i], _ = strconv.ParseUint(fields[1+i], 10, 64)
			}
			dsts := make([][]byte, w)
			for i := range dsts {
				dsts[i] = touched(size)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				if err := pullFrom(pid, dsts[i%w], []remoteBuf{{addrs[i%w], uint64(size)}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := st.Set(ctx, "bench/done", nil); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkMemcpy is one process's copy of each size between private
// buffers, rotating through as many as BenchmarkP2P: the machine's memory
// bandwidth, for scale.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range largeSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			w := window(size)
			srcs, dsts := make([][]byte, w), make([][]byte, w)
			for i := range w {
				srcs[i], dsts[i] = touched(size), touched(size)
			}
			b.SetBytes(int64(size))
			for i := range b.N {
				copy(dsts[i%w], srcs[i%w])
			}
		})
	}
}

// BenchmarkPingPong: round trips of small messages between the two
// processes, over shared memory and over TCP loopback (the fallback
// transport); median-us is the median round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, kind := range []string{"shm", "tcp"} {
		for _, size := range smallSizes {
			b.Run(kind+"/"+sizeName(size), func(b *testing.B) {
				ctx, st, done := startBench(b, "pingpong-"+kind, size)
				defer done()
				tr, err := benchTransport(ctx, kind, 0, st)
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Close()
				msg, buf := touched(size), make([]byte, size)
				rtt := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := range b.N {
					start := time.Now()
					tag := transport.Tag{Comm: 1, Seq: uint64(i)}
					r := tr.Recv(1, tag, testDesc, buf)
					if err := tr.Send(1, tag, testDesc, msg).Wait(ctx); err != nil {
						b.Fatal(err)
					}
					if err := r.Wait(ctx); err != nil {
						b.Fatal(err)
					}
					rtt = append(rtt, time.Since(start))
				}
				b.StopTimer()
				slices.Sort(rtt)
				b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/1e3, "median-us")
			})
		}
	}
}

func benchTransport(ctx context.Context, kind string, rank int, st bootstrap.Store) (transport.Transport, error) {
	if kind == "tcp" {
		return fallback.New(ctx, fallback.Config{Rank: rank, Size: 2, Store: st, Token: testToken})
	}
	return New(ctx, benchConfig(rank, st))
}

// benchConfig is the shared-memory configuration of both processes;
// SHM_BENCH_SPIN (a duration) overrides Spin, for comparing spin times.
func benchConfig(rank int, st bootstrap.Store) Config {
	cfg := Config{Rank: rank, Size: 2, Store: st, Token: testToken}
	if d, err := time.ParseDuration(os.Getenv("SHM_BENCH_SPIN")); err == nil {
		cfg.Spin = d
	}
	return cfg
}

// benchChild is rank 1 of a benchmark.
func benchChild() error {
	size, err := strconv.Atoi(os.Getenv(envBenchSize))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(envBenchN))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := bootstrap.Connect(ctx, bootstrap.Env{Rank: 1, Size: 2, Addr: os.Getenv(envChildAddr), Token: testToken}, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	mode := os.Getenv(envBenchMode)
	switch mode {
	case "raw":
		srcs := make([][]byte, window(size))
		msg := strconv.Itoa(os.Getpid())
		for i := range srcs {
			srcs[i] = touched(size)
			msg += " " + strconv.FormatUint(addrOf(srcs[i]), 10)
		}
		if err := st.Set(ctx, "bench/buf", []byte(msg)); err != nil {
			return err
		}
		_, err := st.Get(ctx, "bench/done")
		runtime.KeepAlive(srcs) // until the parent is done with them
		return err
	case "p2p", "p2p-rings":
		cfg := benchConfig(1, st)
		cfg.NoSingleCopy = mode == "p2p-rings"
		tr, err := New(ctx, cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		return sendStream(ctx, tr, size, n)
	case "pingpong-shm", "pingpong-tcp":
		tr, err := benchTransport(ctx, mode[len("pingpong-"):], 1, st)
		if err != nil {
			return err
		}
		defer tr.Close()
		buf := make([]byte, size)
		for i := range n {
			tag := transport.Tag{Comm: 1, Seq: uint64(i)}
			r := tr.Recv(0, tag, testDesc, buf)
			if err := r.Wait(ctx); err != nil {
				return err
			}
			if err := tr.Send(0, tag, testDesc, r.Data()).Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown benchmark mode %q", mode)
}

// sendStream sends n messages of size bytes to rank 0, window(size) in
// flight, once rank 0 says go, and waits for its done.
func sendStream(ctx context.Context, tr transport.Transport, size, n int) error {
	if err := tr.Recv(0, benchGo, testDesc, nil).Wait(ctx); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	w := window(size)
	srcs := make([][]byte, w)
	for i := range srcs {
		srcs[i] = touched(size)
	}
	sends := make([]*transport.Request, w)
	for i := range n {
		if s := sends[i%w]; s != nil {
			if err := s.Wait(ctx); err != nil {
				return fmt.Errorf("message %d: %w", i-w, err)
			}
		}
		sends[i%w] = tr.Send(0, transport.Tag{Comm: 1, Seq: uint64(i)}, testDesc, srcs[i%w])
	}
	for _, s := range sends {
		if s != nil {
			if err := s.Wait(ctx); err != nil {
				return fmt.Errorf("a last message: %w", err)
			}
		}
	}
	if err := tr.Recv(0, benchDone, testDesc, nil).Wait(ctx); err != nil {
		return fmt.Errorf("waiting for done: %w", err)
	}
	return nil
}
