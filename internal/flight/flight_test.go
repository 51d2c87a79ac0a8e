package flight

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/bootstrap"
)

func progressOf(rank int, started uint64, age time.Duration) bootstrap.RankProgress {
	return bootstrap.RankProgress{Rank: rank, Value: encodeProgressRecord(started, 0), Age: age, Seen: true}
}

// lateRanks names silent ranks, ranks behind, and ranks without progress,
// never this rank, and says so when no rank is late.
func TestLateRanks(t *testing.T) {
	ps := []bootstrap.RankProgress{
		progressOf(0, 10, 100*time.Millisecond),
		progressOf(1, 7, 100*time.Millisecond),
		progressOf(2, 10, 9*time.Second),
		{Rank: 3},
		progressOf(4, 10, 0),
	}
	got := lateRanks(4, 10, ps)
	for _, want := range []string{"rank 2 silent for 9s", "rank 1 has not started seq 10 (at seq 7, 3 behind)", "no progress from ranks 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "rank 0") || strings.Contains(got, "rank 4") {
		t.Errorf("report %q names a rank that is not late", got)
	}
	if strings.Index(got, "rank 2") > strings.Index(got, "rank 1") {
		t.Errorf("report %q: silent ranks come first", got)
	}
	if got := lateRanks(0, 10, ps[:1]); !strings.Contains(got, "none") {
		t.Errorf("no late rank: %q", got)
	}
}

func sampleDumps() []*Dump {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	op := func(seq uint64, st State, took time.Duration) Op {
		o := Op{Seq: seq, Kind: "allreduce", Count: 1024, DType: "float32", Algo: "ring", Peer: -1, State: st, Start: at.Add(-10 * time.Second)}
		if st != Started {
			o.End = o.Start.Add(took)
		}
		if st == Failed {
			o.Peer, o.Err = 2, "context deadline exceeded"
		}
		return o
	}
	peers := []Peer{{Rank: 0, Started: 8, SilentMS: 100}, {Rank: 1, Started: 7, SilentMS: 200}, {Rank: 2, Started: 7, SilentMS: 9000}}
	return []*Dump{
		{Version: 1, Rank: 0, Size: 3, Host: "a", PID: 10, Time: at, Reason: "timeout", Started: 8,
			Ops: []Op{op(7, Done, time.Millisecond), op(8, Failed, 8*time.Second)}, Peers: peers},
		{Version: 1, Rank: 1, Size: 3, Host: "b", PID: 11, Time: at, Reason: "timeout", Started: 7,
			Ops: []Op{op(7, Started, 0)}},
	}
}

// The merged view names the rank without a dump, the silent one, the one
// behind, and each rank's operations.
func TestWriteView(t *testing.T) {
	var b bytes.Buffer
	if err := WriteView(&b, sampleDumps()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"job of 3 ranks, 2 dumps; the furthest rank started seq 8",
		"no dump from rank 2",
		"rank 2 (for 9s, at seq 7)",
		"behind: rank 1 (at seq 7, 1 behind)",
		"allreduce seq 7 (in flight)",
		"peer 2: context deadline exceeded",
		"waiting 10s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("view lacks %q:\n%s", want, out)
		}
	}
	bad := sampleDumps()
	bad[1].Size = 4
	if err := WriteView(&b, bad); err == nil {
		t.Error("dumps of different job sizes were merged")
	}
}

// FuzzReadDump: dumps are data files, possibly truncated or edited;
// any bytes must give a checked dump or an error, and a dump that decodes
// must encode and decode to itself and merge into a view.
func FuzzReadDump(f *testing.F) {
	for _, d := range sampleDumps() {
		b, err := json.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"version":1,"rank":0,"size":1,"started":0,"ops":[]}`))
	f.Add([]byte(`{"version":1,"rank":5,"size":2}`))
	f.Add([]byte(`{"version":1,"rank":0,"size":1,"started":1,"ops":[{"seq":1,"state":"lost","peer":-1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ReadDump(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ReadDump(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("a decoded dump does not decode again: %v\n%s", err, b)
		}
		if len(again.Ops) != len(d.Ops) || again.Started != d.Started || again.Rank != d.Rank {
			t.Fatalf("round trip changed the dump: %+v, %+v", d, again)
		}
		if err := WriteView(&bytes.Buffer{}, []*Dump{d}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeProgressRecord: records come from the store.
func FuzzDecodeProgressRecord(f *testing.F) {
	f.Add(encodeProgressRecord(9, 3))
	f.Add(encodeProgressRecord(3, 9)[:16])
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		started, oldest, err := decodeProgressRecord(data)
		if err != nil {
			return
		}
		if oldest > started || !bytes.Equal(encodeProgressRecord(started, oldest), data) {
			t.Fatalf("%x: started %d oldest %d", data, started, oldest)
		}
	})
}
