package data

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// refSample is a sample parsed by the test's own reader of the format.
type refSample struct {
	line  int64
	label int32
	idx   []uint32
	val   []float32
}

// refParse reads a well-formed LIBSVM text with strings.Fields.
func refParse(t *testing.T, text string) []refSample {
	var out []refSample
	for i, line := range strings.Split(text, "\n") {
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		lv, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("reference: line %d: %v", i+1, err)
		}
		s := refSample{line: int64(i + 1), label: int32(lv)}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, ":")
			ix, _ := strconv.Atoi(k)
			x, _ := strconv.ParseFloat(v, 32)
			s.idx = append(s.idx, uint32(ix-1))
			s.val = append(s.val, float32(x))
		}
		out = append(out, s)
	}
	return out
}

// randomLIBSVM writes n samples with comments, blank lines, tabs,
// carriage returns, exponents and a few long lines.
func randomLIBSVM(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString("# a comment line\n")
	for i := 0; i < n; i++ {
		switch rng.IntN(10) {
		case 0:
			b.WriteString("\n")
		case 1:
			b.WriteString("   # indented comment\n")
		}
		labels := []string{"+1", "-1", "1", "0", "3"}
		b.WriteString(labels[rng.IntN(len(labels))])
		nnz := rng.IntN(8)
		if rng.IntN(50) == 0 {
			nnz = 3000
		}
		ix := 0
		for j := 0; j < nnz; j++ {
			ix += 1 + rng.IntN(20)
			sep := " "
			if rng.IntN(5) == 0 {
				sep = "\t"
			}
			vals := []string{"1", "0.5", "-2.25e-3", "7", "1E2", "0.333333333333333333", ".5"}
			fmt.Fprintf(&b, "%s%d:%s", sep, ix, vals[rng.IntN(len(vals))])
		}
		if rng.IntN(6) == 0 {
			b.WriteString(" # trailing comment")
		}
		if rng.IntN(8) == 0 {
			b.WriteString("\r")
		}
		if i < n-1 || rng.IntN(2) == 0 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func gzipped(t testing.TB, text string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(text))
	zw.Close()
	return b.Bytes()
}

// loadShards loads every shard of a text, plain or gzip, and returns
// them in rank order.
func loadShards(t *testing.T, text string, p int, gz bool, o Options) (trains, tests []*Set) {
	t.Helper()
	z := gzipped(t, text)
	for r := 0; r < p; r++ {
		o.Rank, o.Size = r, p
		var train, test *Set
		var err error
		if gz {
			zr, zerr := gzip.NewReader(bytes.NewReader(z))
			if zerr != nil {
				t.Fatal(zerr)
			}
			train, test, err = ReadLIBSVMStream("mem", zr, o)
		} else {
			lineAt := func(off int64) int64 { return countLines(strings.NewReader(text), off) }
			train, test, err = ReadLIBSVM("mem", strings.NewReader(text), int64(len(text)), lineAt, o)
		}
		if err != nil {
			t.Fatalf("rank %d of %d (gzip %v): %v", r, p, gz, err)
		}
		trains, tests = append(trains, train), append(tests, test)
	}
	return trains, tests
}

// lineOf recovers the 1-based line of sample r of s.
func lineOf(t *testing.T, s *Set, r int) int64 {
	w := s.Where(r)
	n, err := strconv.ParseInt(w[strings.LastIndexByte(w, ':')+1:], 10, 64)
	if err != nil {
		t.Fatalf("Where %q: %v", w, err)
	}
	return n
}

// Every sample of the file is in exactly one rank's shard (train or test
// part), with the label and features the reference parser reads, for
// plain files cut into byte ranges and gzip streams dealt round-robin.
func TestLIBSVMShardsCoverTheFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 12; trial++ {
		text := randomLIBSVM(rng, 1+rng.IntN(60))
		ref := refParse(t, text)
		byLine := map[int64]refSample{}
		for _, s := range ref {
			byLine[s.line] = s
		}
		for _, gz := range []bool{false, true} {
			for _, p := range []int{1, 2, 3, 5, 8, 64} {
				for _, frac := range []float64{0, 0.3} {
					trains, tests := loadShards(t, text, p, gz, Options{TestFraction: frac, Seed: 11})
					seen := map[int64]bool{}
					for _, sets := range [][]*Set{trains, tests} {
						for _, s := range sets {
							if s == nil {
								continue
							}
							for r := 0; r < s.Len(); r++ {
								line := lineOf(t, s, r)
								want, ok := byLine[line]
								if !ok || seen[line] {
									t.Fatalf("P=%d gzip %v: line %d read twice or not a sample (%v)", p, gz, line, ok)
								}
								seen[line] = true
								idx, val := s.Row(r)
								if s.Labels[r] != want.label || fmt.Sprint(idx) != fmt.Sprint(want.idx) || fmt.Sprint(val) != fmt.Sprint(want.val) {
									t.Fatalf("P=%d gzip %v line %d: got %d %v %v, want %d %v %v", p, gz, line, s.Labels[r], idx, val, want.label, want.idx, want.val)
								}
							}
						}
					}
					if len(seen) != len(ref) {
						t.Fatalf("P=%d gzip %v: %d of %d samples read", p, gz, len(seen), len(ref))
					}
				}
			}
		}
	}
}

// The held-out part depends on the seed and the file, not on the number
// of ranks or on compression.
func TestLIBSVMSplitIndependentOfRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	text := randomLIBSVM(rng, 400)
	heldOut := func(p int, gz bool) map[int64]bool {
		_, tests := loadShards(t, text, p, gz, Options{TestFraction: 0.1, Seed: 3})
		m := map[int64]bool{}
		for _, s := range tests {
			for r := 0; r < s.Len(); r++ {
				m[lineOf(t, s, r)] = true
			}
		}
		return m
	}
	one := heldOut(1, false)
	if len(one) < 10 || len(one) > 80 {
		t.Fatalf("%d of about 400 samples held out at 10%%", len(one))
	}
	for _, c := range []struct {
		p  int
		gz bool
	}{{4, false}, {3, true}, {1, true}} {
		if got := heldOut(c.p, c.gz); fmt.Sprint(got) != fmt.Sprint(one) {
			t.Fatalf("P=%d gzip %v: held-out lines differ", c.p, c.gz)
		}
	}
}

// Malformed lines name the file and the line, on whichever rank reads
// them, plain and gzip.
func TestLIBSVMErrorsNameTheLine(t *testing.T) {
	good := "1 1:0.5 3:1\n-1 2:1\n"
	for bad, want := range map[string]string{
		"1 3:1 2:1":        "index 2 after 3",
		"1 0:1":            "index 0",
		"1 x:1":            "not a positive integer",
		"1 3":              "not index:value",
		"1 3:abc":          "not a finite number",
		"1 3:1e999":        "not a finite number",
		"abc 1:1":          "not a number",
		"1.5 1:1":          "not a class number",
		"1,2 1:1":          "multi-label",
		"1 99999999999:1":  "does not fit 32 bits",
		"1 4:1 11:1":       "beyond the dimension 10",
		"1 1:nan":          "not a finite number",
		"2147483648 1:1.0": "not a class number",
	} {
		text := good + good + bad + "\n" + good
		for _, gz := range []bool{false, true} {
			for _, p := range []int{1, 3} {
				var errs []error
				for r := 0; r < p; r++ {
					o := Options{Rank: r, Size: p, Dim: 10}
					var err error
					if gz {
						zr, _ := gzip.NewReader(bytes.NewReader(gzipped(t, text)))
						_, _, err = ReadLIBSVMStream("f.svm", zr, o)
					} else {
						lineAt := func(off int64) int64 { return countLines(strings.NewReader(text), off) }
						_, _, err = ReadLIBSVM("f.svm", strings.NewReader(text), int64(len(text)), lineAt, o)
					}
					if err != nil {
						errs = append(errs, err)
					}
				}
				if len(errs) != 1 {
					t.Fatalf("%q (gzip %v, P=%d): %d ranks failed, want exactly the one reading it: %v", bad, gz, p, len(errs), errs)
				}
				msg := errs[0].Error()
				if !strings.HasPrefix(msg, "f.svm:5: ") || !strings.Contains(msg, want) || !errors.Is(errs[0], ErrFormat) {
					t.Fatalf("%q (gzip %v, P=%d): error %q, want f.svm:5: ...%s", bad, gz, p, msg, want)
				}
			}
		}
	}
}

func TestLIBSVMFiles(t *testing.T) {
	dir := t.TempDir()
	text := randomLIBSVM(rand.New(rand.NewPCG(1, 1)), 50)
	plain := filepath.Join(dir, "a.txt")
	gz := filepath.Join(dir, "b.txt") // gzip without the .gz name
	os.WriteFile(plain, []byte(text), 0o644)
	os.WriteFile(gz, gzipped(t, text), 0o644)
	a, _, err := LoadLIBSVM(plain, Options{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := LoadLIBSVM(gz, Options{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.Labels, a.Idx, a.Val) != fmt.Sprint(b.Labels, b.Idx, b.Val) {
		t.Fatal("plain and gzip files read differently")
	}
	// bzip2, as the LIBSVM site publishes its sets (compressed by the
	// bzip2 tool when it is installed: the standard library only reads).
	if _, err := exec.LookPath("bzip2"); err == nil {
		bz := filepath.Join(dir, "e.svm")
		os.WriteFile(bz, []byte(text), 0o644)
		if out, err := exec.Command("bzip2", bz).CombinedOutput(); err != nil {
			t.Fatalf("bzip2: %v %s", err, out)
		}
		c, _, err := LoadLIBSVM(bz+".bz2", Options{Rank: 1, Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() != (a.Len()+1)/2 && c.Len() != a.Len()/2 {
			t.Fatalf("bzip2 shard 1 of 2: %d of %d samples", c.Len(), a.Len())
		}
		raw, _ := os.ReadFile(bz + ".bz2")
		os.WriteFile(bz, raw[:len(raw)/2], 0o644)
		if _, _, err := LoadLIBSVM(bz, Options{Size: 1}); err == nil || !strings.HasPrefix(err.Error(), bz+":") {
			t.Fatalf("truncated bzip2: %v", err)
		}
	}
	if _, _, err := LoadLIBSVM(filepath.Join(dir, "missing"), Options{Size: 1}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
	// A gzip file cut short.
	z := gzipped(t, text)
	trunc := filepath.Join(dir, "c.gz")
	os.WriteFile(trunc, z[:len(z)/2], 0o644)
	if _, _, err := LoadLIBSVM(trunc, Options{Size: 1}); err == nil || !strings.Contains(err.Error(), "truncated") || !strings.HasPrefix(err.Error(), trunc+":") {
		t.Fatalf("truncated gzip: %v", err)
	}
	// An error on a line of a plain file read by a later rank names the
	// line counted from the start of the file.
	bad := filepath.Join(dir, "d.txt")
	os.WriteFile(bad, []byte(strings.Repeat("1 1:1\n", 100)+"1 2:1 1:1\n"), 0o644)
	_, _, err = LoadLIBSVM(bad, Options{Rank: 3, Size: 4})
	if err == nil || !strings.HasPrefix(err.Error(), bad+":101: ") {
		t.Fatalf("error on the last rank: %v", err)
	}
}

func TestLabels(t *testing.T) {
	set := func(labels ...int32) *Set { return &Set{Name: "f", Labels: labels} }
	for _, c := range []struct {
		labels   []int32
		declared int
		want     []int32
		classes  int
		err      string
	}{
		{[]int32{1, -1, 1}, 0, []int32{1, 0, 1}, 2, ""},
		{[]int32{0, 1, 1}, 0, []int32{0, 1, 1}, 2, ""},
		{[]int32{1, 5, 3}, 0, []int32{1, 5, 3}, 6, ""},
		{[]int32{-1, 0, 1}, 0, nil, 0, "label -1 out of range"},
		{[]int32{0, 2, 12}, 10, nil, 0, "label 12 out of range (10 classes declared)"},
		{[]int32{-1, 1}, 2, []int32{0, 1}, 2, ""},
		{[]int32{-1, 1, 7}, 0, nil, 0, "label 7 out of range (the file's labels are -1/+1 binary)"},
		{[]int32{1, 1}, 0, []int32{1, 1}, 2, ""},
	} {
		s := set(c.labels...)
		l := DecideLabels(Summarize(s), c.declared)
		err := l.Apply(s)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.labels, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(s.Labels) != fmt.Sprint(c.want) || s.Classes != c.classes {
			t.Errorf("%v: got %v %d classes, %v", c.labels, s.Labels, s.Classes, err)
		}
	}
}
