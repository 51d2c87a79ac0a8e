//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/transport"
)

// blocked is what a rank of TestKilledRank waits for: receives no one
// sends to and large messages no one reads, which must fail once a peer
// is lost, and small messages filling the rings, which may have gone
// through before.
type blocked struct {
	mustFail, mayComplete []*transport.Request
}

// blockOn posts a receive from every other rank and sends every other
// rank more than its ring and budget take (small messages filling the
// ring, large ones waiting for receives that are never posted), so that
// the rank is blocked on the rings both ways.
func blockOn(tr *Transport) blocked {
	var b blocked
	desc := transport.Desc{Kind: transport.OpP2P}
	for p := range tr.Size() {
		if p == tr.Rank() {
			continue
		}
		b.mustFail = append(b.mustFail, tr.Recv(p, transport.Tag{Comm: 9, Seq: 1}, desc, nil))
		small := make([]byte, 4<<10)
		for i := range 400 {
			b.mayComplete = append(b.mayComplete, tr.Send(p, transport.Tag{Comm: 9, Seq: 2, Step: uint32(i)}, desc, small))
		}
		for i := range 4 {
			s := tr.Send(p, transport.Tag{Comm: 9, Seq: 3, Step: uint32(i)}, desc, make([]byte, 1<<20))
			if tr.SingleCopy(p) {
				b.mustFail = append(b.mustFail, s) // stays with this rank until read
			} else {
				b.mayComplete = append(b.mayComplete, s)
			}
		}
	}
	return b
}

// killChild is a rank of TestKilledRank: it blocks on the rings, says it
// is ready, and then (unless it is the victim, which the test kills)
// checks that every request fails naming the victim, reports when it
// saw the first failure, closes and checks that its mappings are gone.
func killChild() error {
	rank, size, addr, err := childEnv()
	if err != nil {
		return err
	}
	victim, _ := strconv.Atoi(os.Getenv(envVictim))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, tr, err := joinJob(ctx, rank, size, addr, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	reqs := blockOn(tr)
	if err := st.Set(ctx, fmt.Sprintf("test/ready/%d", rank), nil); err != nil {
		return err
	}
	seen, err := checkFailures(ctx, reqs, victim)
	if err != nil {
		return err
	}
	if err := checkErr(tr, victim); err != nil {
		return err
	}
	if err := survivorsSaw(ctx, st, rank, size, victim); err != nil {
		return err
	}
	tr.Close()
	if err := checkNoMappings(); err != nil {
		return err
	}
	fmt.Printf("failed-at %d\n", seen.UnixNano())
	return nil
}

// checkFailures waits for every request: those that must fail must fail
// naming the victim, the others may also have completed. It returns when
// the first one failed.
func checkFailures(ctx context.Context, b blocked, victim int) (time.Time, error) {
	var first time.Time
	for i, r := range append(b.mustFail, b.mayComplete...) {
		err := r.Wait(ctx)
		if first.IsZero() {
			first = time.Now()
		}
		if err == nil && i >= len(b.mustFail) {
			continue
		}
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Peer != victim || !errors.Is(err, transport.ErrPeerLost) {
			return first, fmt.Errorf("%v: %v, want a lost-peer error naming rank %d", r, err, victim)
		}
	}
	return first, nil
}

// checkErr checks that the transport failed naming the victim.
func checkErr(tr *Transport, victim int) error {
	var pe *transport.PeerError
	if err := tr.Err(); !errors.As(err, &pe) || pe.Peer != victim {
		return fmt.Errorf("Err = %v, want rank %d lost", err, victim)
	}
	return nil
}

// survivorsSaw says this rank has seen the failure and waits until every
// survivor has, so that no survivor's Close (whose goodbye carries the
// cause, but names the closing rank) reaches another first.
func survivorsSaw(ctx context.Context, st bootstrap.Store, rank, size, victim int) error {
	if err := st.Set(ctx, fmt.Sprintf("test/seen/%d", rank), nil); err != nil {
		return err
	}
	for r := range size {
		if r != victim {
			if _, err := st.Get(ctx, fmt.Sprintf("test/seen/%d", r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNoMappings fails if this process still maps an inbox.
func checkNoMappings() error {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(maps)) {
		if strings.Contains(line, "memfd:sparcml-shm") {
			return fmt.Errorf("an inbox is still mapped after Close: %s", strings.TrimSpace(line))
		}
	}
	return nil
}

// TestKilledRank: four ranks in four processes, each blocked on the rings
// (receives posted, sends held back by full rings and unread large
// messages); rank 2 is killed with SIGKILL. Every request of every
// survivor fails naming rank 2, promptly, nothing hangs, and after Close
// no survivor maps an inbox and nothing is left in /dev/shm.
func TestKilledRank(t *testing.T) {
	for _, opts := range []string{"single-copy", "rings"} {
		t.Run(opts, func(t *testing.T) { testKilledRank(t, opts) })
	}
}

func testKilledRank(t *testing.T, opts string) {
	const size, victim = 4, 2
	before := devShm(t)
	addr := freeAddr(t)
	cmds, outs := startChildren(t, "kill", size, addr, envVictim+"="+strconv.Itoa(victim), envChildOpts+"="+opts)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, tr, err := joinJob(ctx, 0, size, addr, func(c *Config) { c.NoSingleCopy = opts == "rings" })
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reqs := blockOn(tr)
	for r := 1; r < size; r++ {
		if _, err := st.Get(ctx, fmt.Sprintf("test/ready/%d", r)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // everyone settles into waiting
	killed := time.Now()
	if err := cmds[victim-1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	seen, err := checkFailures(ctx, reqs, victim)
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	t.Logf("rank 0 saw rank %d's death after %v: %v", victim, seen.Sub(killed), tr.Err())
	if err := checkErr(tr, victim); err != nil {
		t.Error(err)
	}
	if err := survivorsSaw(ctx, st, 0, size, victim); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if err := checkNoMappings(); err != nil {
		t.Error(err)
	}
	for i, cmd := range cmds {
		r := i + 1
		if r == victim {
			continue
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d: %v", r, err)
			continue
		}
		f := strings.Fields(outs[i].String())
		if len(f) != 2 || f[0] != "failed-at" {
			t.Errorf("rank %d reported %q", r, outs[i].String())
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		t.Logf("rank %d saw it after %v", r, time.Unix(0, ns).Sub(killed))
	}
	if after := devShm(t); !slices.Equal(before, after) {
		t.Errorf("/dev/shm changed: before %v, after %v", before, after)
	}
}
