package fallback

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sparcml/sparcml/transport"
)

var benchSizes = []int{64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

// benchWindow is how many messages are in flight at once, as in a
// pipelined collective: at least 4, and at least 8 MiB, so that small
// messages are not measured one round trip at a time while the raw TCP
// baseline streams.
func benchWindow(size int) int { return max(4, (8<<20)/size) }

// BenchmarkP2P streams messages from rank 0 to rank 1 over the TCP
// transport, receives posted ahead (zero-copy path). Compare with
// BenchmarkRawTCP.
func BenchmarkP2P(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			j := startJob(b, 2, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			window := benchWindow(size)
			src := touched(size)
			bufs := make([][]byte, window)
			for i := range bufs {
				bufs[i] = touched(size)
			}
			sends := make([]*transport.Request, window)
			recvs := make([]*transport.Request, window)
			wait := func(i int) {
				if err := recvs[i].Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if err := sends[i].Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				slot := i % window
				if i >= window {
					wait(slot)
				}
				tag := transport.Tag{Comm: 1, Seq: uint64(i)}
				recvs[slot] = j.ts[1].Recv(0, tag, testDesc, bufs[slot])
				sends[slot] = j.ts[0].Send(1, tag, testDesc, src)
			}
			for i := max(0, b.N-window); i < b.N; i++ {
				wait(i % window)
			}
			reportCPU(b, cpu, size)
		})
	}
}

// BenchmarkRawTCP is the baseline: a plain Go TCP stream over loopback,
// one Write and one io.ReadFull per message, with the transport's socket
// buffer size and the same rotation over benchWindow receive buffers (the
// same memory footprint) so that only the transport's own overhead
// differs.
func BenchmarkRawTCP(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, _ := ln.Accept()
				accepted <- c
			}()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			server := <-accepted
			if server == nil {
				b.Fatal("accept failed")
			}
			defer server.Close()
			for _, c := range []net.Conn{client, server} {
				c.SetDeadline(time.Now().Add(5 * time.Minute)) // a hang fails
				// Plain Go sockets: kernel buffer autotuning, as the
				// transport uses by default.
				_ = c.(*net.TCPConn)
			}
			src, dsts := touched(size), make([][]byte, benchWindow(size))
			for i := range dsts {
				dsts[i] = touched(size)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			cpu := processCPU()
			done := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					if _, err := client.Write(src); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < b.N; i++ {
				if _, err := io.ReadFull(server, dsts[i%len(dsts)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			reportCPU(b, cpu, size)
		})
	}
}

// reportCPU adds the CPU time (user and system, sender and receiver
// together) spent per GB moved since start: on a shared machine it
// compares the transport with raw TCP better than the wall-clock rate.
func reportCPU(b *testing.B, start time.Duration, size int) {
	used := processCPU() - start
	if used > 0 {
		b.ReportMetric(used.Seconds()/(float64(b.N)*float64(size)/1e9), "cpu-s/GB")
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// touched returns a buffer whose pages are already mapped, so that page
// faults on first use do not count against either side.
func touched(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return b
}

// BenchmarkPingPong measures the round trip of a small message between two
// ranks (ns/op is one round trip): the latency term of the cost model.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{8, 4 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			j := startJob(b, 2, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			msg := touched(size)
			bufs := [2][]byte{touched(size), touched(size)}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tag := transport.Tag{Comm: 1, Seq: uint64(i)}
				pong := j.ts[0].Recv(1, tag, testDesc, bufs[0])
				ping := j.ts[1].Recv(0, tag, testDesc, bufs[1])
				j.ts[0].Send(1, tag, testDesc, msg)
				if err := ping.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				j.ts[1].Send(0, tag, testDesc, msg)
				if err := pong.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
