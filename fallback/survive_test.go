package fallback

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/wire"
	"github.com/sparcml/sparcml/transport"
)

// lostLog records the peers a transport reports lost.
type lostLog struct {
	mu   sync.Mutex
	lost map[int]error
	ch   chan int
}

func newLostLog() *lostLog { return &lostLog{lost: make(map[int]error), ch: make(chan int, 16)} }

func (l *lostLog) report(peer int, err error) {
	l.mu.Lock()
	l.lost[peer] = err
	l.mu.Unlock()
	l.ch <- peer
}

func (l *lostLog) wait(t *testing.T, want int) error {
	t.Helper()
	select {
	case p := <-l.ch:
		if p != want {
			t.Fatalf("lost rank %d, want %d", p, want)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lost[p]
	case <-time.After(testTimeout):
		t.Fatalf("rank %d was not reported lost", want)
		return nil
	}
}

// exchange sends a checked message each way between a and b (ranks of j)
// at seq and fails the test if it does not arrive intact.
func exchange(t *testing.T, j *job, a, b int, seq uint64) {
	t.Helper()
	ctx := waitCtx(t)
	tag := transport.Tag{Comm: 9, Seq: seq}
	for _, pair := range [][2]int{{a, b}, {b, a}} {
		src, dst := pair[0], pair[1]
		want := payload(src, dst, tag, 1000)
		recv := j.ts[dst].Recv(src, tag, testDesc, make([]byte, 1000))
		send := j.ts[src].Send(dst, tag, testDesc, want)
		if err := waitAll(ctx, []*transport.Request{send, recv}); err != nil {
			t.Fatalf("rank %d -> %d after the loss: %v", src, dst, err)
		}
		if !bytes.Equal(recv.Data(), want) {
			t.Fatalf("rank %d -> %d: payload differs", src, dst)
		}
	}
}

// In the per-peer model a rank that dies (its connections reset, as at
// kill -9) fails only what involves it: every survivor is told once,
// its receive from the dead rank fails naming it, the transport has no
// sticky error, and messages among the survivors still flow.
func TestSurviveLostPeer(t *testing.T) {
	const p = 4
	logs := make([]*lostLog, p)
	j := startJob(t, p, nil)
	for r, tr := range j.ts {
		logs[r] = newLostLog()
		tr.Survive(logs[r].report)
	}
	tag := transport.Tag{Comm: 9, Seq: 1}
	pending := j.ts[0].Recv(3, tag, testDesc, nil)
	j.ts[3].Abort(errors.New("killed by the test"))
	for r := 0; r < 3; r++ {
		err := logs[r].wait(t, 3)
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Peer != 3 || !errors.Is(err, transport.ErrPeerLost) {
			t.Fatalf("rank %d: the loss is %v, want a PeerError naming rank 3", r, err)
		}
		if err := j.ts[r].Err(); err != nil {
			t.Fatalf("rank %d: sticky error %v after losing one peer", r, err)
		}
	}
	if err := pending.Wait(waitCtx(t)); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("the receive from the dead rank: %v", err)
	}
	if err := j.ts[1].Send(3, tag, testDesc, []byte("x")).Wait(waitCtx(t)); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("a send to the dead rank: %v", err)
	}
	for seq := uint64(2); seq < 6; seq++ {
		exchange(t, j, 0, 1, seq)
		exchange(t, j, 1, 2, seq)
		exchange(t, j, 0, 2, seq)
	}
}

// A peer that authenticated and then sends a well-formed frame the
// receiver cannot accept (an unknown kind, a size beyond MaxMessage)
// closes only that peer's connections, with an error naming it; the
// other connections are unharmed.
func TestSurviveBadFrames(t *testing.T) {
	bad := map[string]wire.Header{
		"unknown kind":  {Kind: 9, Tag: transport.Tag{Comm: 9, Seq: 1}},
		"oversize":      {Kind: wire.Data, Tag: transport.Tag{Comm: 9, Seq: 1}, Desc: testDesc, Length: 1 << 40},
		"fail-op, long": {Kind: wire.FailOp, Tag: transport.Tag{Comm: 9, Seq: 1}, Length: wire.MaxReasonLen + 1},
	}
	for name, h := range bad {
		t.Run(name, func(t *testing.T) {
			const p = 3
			logs := make([]*lostLog, p)
			j := startJob(t, p, func(c *Config) { c.MaxMessage = 1 << 20 })
			for r, tr := range j.ts {
				logs[r] = newLostLog()
				tr.Survive(logs[r].report)
			}
			b := make([]byte, wire.HeaderSize)
			wire.EncodeHeader(b, &h)
			if _, err := j.ts[2].peers[0][0].nc.Write(b); err != nil {
				t.Fatal(err)
			}
			err := logs[0].wait(t, 2)
			if !errors.Is(err, transport.ErrProtocol) || !bytesContain(err, "rank 2") {
				t.Fatalf("rank 0's error %v must be a protocol error naming rank 2", err)
			}
			exchange(t, j, 0, 1, 2)
			exchange(t, j, 1, 2, 3)
			if err := j.ts[0].Err(); err != nil {
				t.Fatalf("rank 0 failed as a whole: %v", err)
			}
		})
	}
}

func bytesContain(err error, s string) bool {
	return bytes.Contains([]byte(fmt.Sprint(err)), []byte(s))
}
