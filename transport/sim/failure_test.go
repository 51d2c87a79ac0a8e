package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sparcml/sparcml/transport"
	"github.com/sparcml/sparcml/transport/sim"
)

// The conformance suite (transport/transporttest) drives a transport from
// goroutines of its own under wall-clock deadlines, which the simulator's
// scheduler does not run; these tests hold the simulated transport to the
// parts of the contract it must share with the others.

// TestCaps: every rank reports the configured segment size and no
// failure capability beyond the contract.
func TestCaps(t *testing.T) {
	w, err := sim.New(sim.Config{Ranks: 3, Rate: rate, Latency: lat, SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		c := w.Transport(r).Caps()
		if c.SegmentBytes != 64<<10 || c.Failed != nil || c.FailLocal != nil || c.FailOpLocal != nil || c.Survive != nil {
			t.Errorf("rank %d: Caps = %+v, want segments of 64 KiB and no failure capability", r, c)
		}
	}
}

// TestFailOpCodes: rank 0 fails one operation with a failure of each
// code; rank 1's and rank 2's receives of it fail with a RemoteFailure of
// that code from rank 0, classified by the code alone, and a failure rank
// 1 relays to rank 2 still names rank 0.
func TestFailOpCodes(t *testing.T) {
	causes := []error{
		errors.New("sim: a failure of no kind"),
		fmt.Errorf("%w: sim: a null buffer", transport.ErrInvalid),
		fmt.Errorf("%w: sim: rank 0 called allreduce", transport.ErrMismatch),
		&transport.PeerError{Peer: 2, Kind: transport.ErrPeerLost, Err: errors.New("sim: gone")},
		fmt.Errorf("%w while waiting", context.DeadlineExceeded),
		fmt.Errorf("sim: %w", transport.ErrRevoked),
	}
	w, err := sim.New(sim.Config{Ranks: 3, Rate: rate, Latency: lat})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([][]error, 3)
	relayed := len(causes) + 1
	_, err = w.Run(func(tr *sim.Transport) {
		r := tr.Rank()
		for i, cause := range causes {
			tag := transport.Tag{Comm: 7, Seq: uint64(i + 1)}
			if r == 0 {
				tr.FailOp(7, tag.Seq, cause)
				continue
			}
			errs[r] = append(errs[r], tr.Recv(0, tag, p2p, nil).Wait(context.Background()))
		}
		tag := transport.Tag{Comm: 7, Seq: uint64(relayed)}
		switch r {
		case 0:
			tr.FailOp(7, tag.Seq, causes[2])
		case 1:
			err := tr.Recv(0, tag, p2p, nil).Wait(context.Background())
			tr.FailOp(7, tag.Seq+1, err)
		case 2:
			tag.Seq++
			errs[r] = append(errs[r], tr.Recv(1, tag, p2p, nil).Wait(context.Background()))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := 1; r < 3; r++ {
		for i, got := range errs[r] {
			cause := causes[2] // relayed by rank 1 (rank 2's last)
			if i < len(causes) {
				cause = causes[i]
			}
			want := transport.CodeOf(cause)
			var rf *transport.RemoteFailure
			if !errors.As(got, &rf) || rf.Peer != 0 || rf.Code != want || transport.CodeOf(got) != want {
				t.Errorf("rank %d, failure %d: %v (%#v), want a RemoteFailure of code %v from rank 0", r, i, got, rf, want)
				continue
			}
			if s := want.Err(); s != nil && !errors.Is(got, s) {
				t.Errorf("rank %d, failure %d: %v does not match %v", r, i, got, s)
			}
			if !errors.Is(got, transport.ErrAborted) {
				t.Errorf("rank %d, failure %d: %v does not match ErrAborted", r, i, got)
			}
		}
	}
	if len(errs[1]) != len(causes) || len(errs[2]) != len(causes)+1 {
		t.Fatalf("ranks 1 and 2 saw %d and %d failures, want %d and %d", len(errs[1]), len(errs[2]), len(causes), len(causes)+1)
	}
}
