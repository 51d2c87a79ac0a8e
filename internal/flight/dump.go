package flight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sparcml/sparcml/transport"
)

// Dump is one rank's flight recorder as written to
// SPARCML_DUMP_DIR: a JSON object, one per file. `sparcml trace` reads and merges
// them (docs/RELIABILITY.md, "The flight recorder").
type Dump struct {
	Version int       `json:"version"` // DumpVersion
	Rank    int       `json:"rank"`
	Size    int       `json:"size"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Time    time.Time `json:"time"`    // when it was written
	Reason  string    `json:"reason"`  // "timeout", "failure", "SIGUSR1", ...
	Started uint64    `json:"started"` // the highest sequence number started
	Ops     []Op      `json:"ops"`     // oldest first
	// Peers is every rank's progress as rank 0's store had it when the
	// dump was written (empty without a store): what the others knew
	// of a rank that is stopped and writes no dump of its own.
	Peers []Peer `json:"peers,omitempty"`
}

// Peer is one rank's progress record as the store had it.
type Peer struct {
	Rank    int    `json:"rank"`
	Started uint64 `json:"started"`
	// SilentMS is how long the rank had not published progress, in
	// milliseconds; progress is published every half second.
	SilentMS int64 `json:"silent_ms"`
}

const (
	// DumpVersion is the version of the dump format this package writes
	// and reads.
	DumpVersion = 1
	// maxDump bounds a dump file read by ReadDump.
	maxDump     = 64 << 20
	maxDumpSize = 1 << 24 // ranks
)

// DumpName is the file a rank writes in SPARCML_DUMP_DIR.
func DumpName(rank, pid int) string {
	return fmt.Sprintf("sparcml-flight-%d-%d.json", rank, pid)
}

// WriteDump writes d into dir atomically (a temporary file renamed),
// so a reader never sees half a dump; it returns the file's path.
func WriteDump(dir string, d *Dump) (string, error) {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, DumpName(d.Rank, d.PID))
	tmp, err := os.CreateTemp(dir, ".sparcml-flight-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", werr
	}
	return path, nil
}

// ReadDump decodes one rank's dump and checks it: a known version,
// a rank inside the job, known states, operations in order. Any error
// says what is wrong.
func ReadDump(r io.Reader) (*Dump, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDump+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDump {
		return nil, fmt.Errorf("flight dump larger than %d bytes", maxDump)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Dump
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("flight dump: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("flight dump: data after the dump")
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("flight dump of rank %d: %w", d.Rank, err)
	}
	return &d, nil
}

func (d *Dump) check() error {
	switch {
	case d.Version != DumpVersion:
		return fmt.Errorf("version %d, this sparcml reads %d", d.Version, DumpVersion)
	case d.Size < 1 || d.Size > maxDumpSize:
		return fmt.Errorf("job size %d outside [1,%d]", d.Size, maxDumpSize)
	case d.Rank < 0 || d.Rank >= d.Size:
		return fmt.Errorf("rank outside [0,%d)", d.Size)
	}
	for i, op := range d.Ops {
		switch op.State {
		case Started, Done, Failed:
		default:
			return fmt.Errorf("operation %d: unknown state %q", i, op.State)
		}
		if i > 0 && op.Seq <= d.Ops[i-1].Seq {
			return fmt.Errorf("operation %d: seq %d after seq %d", i, op.Seq, d.Ops[i-1].Seq)
		}
		if op.Seq > d.Started {
			return fmt.Errorf("operation %d: seq %d beyond the highest started, %d", i, op.Seq, d.Started)
		}
		if op.Peer < -1 || op.Peer >= d.Size {
			return fmt.Errorf("operation %d: peer %d outside the job", i, op.Peer)
		}
	}
	for i, p := range d.Peers {
		if p.Rank < 0 || p.Rank >= d.Size || p.SilentMS < 0 {
			return fmt.Errorf("peer entry %d: rank %d, silent %d ms", i, p.Rank, p.SilentMS)
		}
	}
	return nil
}

// WriteView merges the dumps of a job's ranks into one view: for
// each rank, the last operation it started and the oldest it has not
// finished; the ranks behind the others, and those that left no dump,
// named first; then each rank's recent operations. It is what `sparcml
// trace` prints.
func WriteView(w io.Writer, dumps []*Dump) error {
	if len(dumps) == 0 {
		return fmt.Errorf("no flight dumps")
	}
	size := dumps[0].Size
	byRank := make(map[int]*Dump)
	for _, d := range dumps {
		if d.Size != size {
			return fmt.Errorf("rank %d's dump says the job has %d ranks, rank %d's %d", d.Rank, d.Size, dumps[0].Rank, size)
		}
		if old, ok := byRank[d.Rank]; !ok || d.Time.After(old.Time) {
			byRank[d.Rank] = d // the latest dump of a rank wins
		}
	}
	var top uint64
	var missing []int
	for r := 0; r < size; r++ {
		if d, ok := byRank[r]; ok {
			top = max(top, d.Started)
		} else {
			missing = append(missing, r)
		}
	}
	fmt.Fprintf(w, "job of %d ranks, %d dumps; the furthest rank started seq %d\n", size, len(byRank), top)
	if len(missing) > 0 {
		fmt.Fprintf(w, "no dump from %s\n", transport.RankList(missing))
	}
	if silent := silentRanks(byRank); len(silent) > 0 {
		fmt.Fprintf(w, "silent (no progress published for over %v when another rank dumped): %s\n", silentAfter, strings.Join(silent, ", "))
	}
	var behind []string
	for r := 0; r < size; r++ {
		if d, ok := byRank[r]; ok && d.Started < top {
			behind = append(behind, fmt.Sprintf("rank %d (at seq %d, %d behind)", r, d.Started, top-d.Started))
		}
	}
	if len(behind) > 0 {
		fmt.Fprintf(w, "behind: %s\n", strings.Join(behind, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-5s %-8s %-30s %s\n", "rank", "started", "oldest unfinished", "dump")
	for r := 0; r < size; r++ {
		d, ok := byRank[r]
		if !ok {
			fmt.Fprintf(w, "%-5d %-8s %-30s %s\n", r, "-", "-", "none")
			continue
		}
		fmt.Fprintf(w, "%-5d %-8d %-30s %s on %s:%d at %s\n", r, d.Started, oldestUnfinished(d), d.Reason, d.Host, d.PID, d.Time.Format(time.RFC3339Nano))
	}
	for _, r := range slices.Sorted(maps.Keys(byRank)) {
		d := byRank[r]
		fmt.Fprintf(w, "\nrank %d, last %d operations:\n", r, len(d.Ops))
		for _, op := range d.Ops {
			fmt.Fprintf(w, "  %s\n", describeOp(op, d.Time))
		}
	}
	return nil
}

// silentRanks lists the ranks that some dump's store view shows silent,
// with the longest silence seen.
func silentRanks(byRank map[int]*Dump) []string {
	longest := map[int]Peer{}
	for _, d := range byRank {
		for _, p := range d.Peers {
			if time.Duration(p.SilentMS)*time.Millisecond > silentAfter && p.SilentMS > longest[p.Rank].SilentMS {
				longest[p.Rank] = p
			}
		}
	}
	var out []string
	for _, r := range slices.Sorted(maps.Keys(longest)) {
		p := longest[r]
		out = append(out, fmt.Sprintf("rank %d (for %v, at seq %d)", r, (time.Duration(p.SilentMS)*time.Millisecond).Round(100*time.Millisecond), p.Started))
	}
	return out
}

// oldestUnfinished names the oldest operation of d not done.
func oldestUnfinished(d *Dump) string {
	for _, op := range d.Ops {
		if op.State == Started {
			return fmt.Sprintf("%s seq %d (in flight)", op.Kind, op.Seq)
		}
	}
	for _, op := range d.Ops {
		if op.State == Failed {
			return fmt.Sprintf("%s seq %d (failed)", op.Kind, op.Seq)
		}
	}
	return "none"
}

// describeOp is one line of the view.
func describeOp(op Op, at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %-6d %-14s %-7s", op.Seq, op.Kind, op.State)
	if op.Count > 0 {
		fmt.Fprintf(&b, " %d x %s", op.Count, op.DType)
	}
	if op.Algo != "" {
		fmt.Fprintf(&b, " algo %s", op.Algo)
	}
	if op.End.IsZero() {
		fmt.Fprintf(&b, " waiting %v", at.Sub(op.Start).Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, " took %v", op.End.Sub(op.Start).Round(time.Microsecond))
	}
	if op.Peer >= 0 {
		fmt.Fprintf(&b, " peer %d", op.Peer)
	}
	if op.Err != "" {
		fmt.Fprintf(&b, ": %s", op.Err)
	}
	return b.String()
}
