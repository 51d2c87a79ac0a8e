package world

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sparcml/sparcml/transport"
)

// The job's own communicator (nil members) maps ranks to themselves; a
// derived one maps through its members, and -1 says "not a member".
func TestMembers(t *testing.T) {
	var job Members
	if job.JobRank(3) != 3 || job.LocalRank(3) != 3 {
		t.Fatal("the job's communicator does not map ranks to themselves")
	}
	sub := Members{5, 2, 7}
	for r, j := range sub {
		if sub.JobRank(r) != j || sub.LocalRank(j) != r {
			t.Fatalf("rank %d: job rank %d, back %d", r, sub.JobRank(r), sub.LocalRank(j))
		}
	}
	if sub.LocalRank(0) != -1 {
		t.Fatal("a job rank outside the communicator has a rank in it")
	}
}

// Derived ids never collide with the job's id nor carry the library bit,
// and depend on every input.
func TestDeriveID(t *testing.T) {
	seen := map[uint32]string{}
	for _, what := range []string{"split", "shrink"} {
		for seq := range uint64(50) {
			for salt := range uint64(4) {
				id := DeriveID(UserCommID, what, seq, salt)
				if id < 2 || id&SysCommBit != 0 {
					t.Fatalf("%s seq %d salt %d: id %#x", what, seq, salt, id)
				}
				key := fmt.Sprint(what, seq, salt)
				if prev, dup := seen[id]; dup {
					t.Fatalf("id %#x for %s and %s", id, prev, key)
				}
				seen[id] = key
			}
		}
	}
}

// FailedRanks translates the lost job ranks an error names, however deep,
// into the communicator's ranks, leaving out this rank and non-members,
// and adds the ranks the world already knows lost.
func TestFailedRanks(t *testing.T) {
	w := New(nil)
	w.lost[9] = errors.New("gone")
	members := Members{4, 9, 6, 1}
	err := fmt.Errorf("op: %w", errors.Join(
		&transport.PeerError{Peer: 6, Kind: transport.ErrPeerLost, Err: errors.New("EOF")},
		fmt.Errorf("again: %w", &transport.PeerError{Peer: 6, Kind: transport.ErrPeerLost}),
		&transport.PeerError{Peer: 3, Kind: transport.ErrPeerLost},
		&transport.PeerError{Peer: 4, Kind: transport.ErrPeerLost},
	))
	if got := w.FailedRanks(members, 0, err); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("failed ranks %v, want [1 2]", got)
	}
	if got := w.FailedRanks(members, 1, nil); len(got) != 0 {
		t.Fatalf("this rank named itself failed: %v", got)
	}
}

// A revocation keeps its first cause.
func TestRevocation(t *testing.T) {
	var r Revocation
	first, second := errors.New("first"), errors.New("second")
	if !r.Set(first) || r.Set(second) || r.Err() != first {
		t.Fatalf("cause %v", r.Err())
	}
	if r.NextShrink() != 1 || r.NextShrink() != 2 {
		t.Fatal("shrinks are not counted from 1")
	}
}
