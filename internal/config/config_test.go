package config

import (
	"errors"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparcml/sparcml/internal/logging"
)

var update = flag.Bool("update", false, "rewrite docs/CONFIGURATION.md's tables of variables from Vars")

// samples gives every variable a valid and an invalid value. A variable
// added to Vars without samples fails TestEveryVariableHasSamples.
var samples = map[string]struct{ valid, invalid string }{
	"SPARCML_RANK":               {"3", "-1"},
	"SPARCML_SIZE":               {"8", "0"},
	"SPARCML_LOCAL_RANK":         {"1", "first"},
	"SPARCML_LOCAL_SIZE":         {"2", "0"},
	"SPARCML_ADDR":               {"node1:29500", "node1"},
	"SPARCML_TOKEN":              {"s3cret", "line\nbreak"},
	"SPARCML_PORT":               {"29501", "70000"},
	"SPARCML_IFNAME":             {"^docker,lo", "eth0 eth1"},
	"SPARCML_TRANSPORT":          {"TCP", "ib"},
	"SPARCML_TIMEOUT":            {"90", "soon"},
	"SPARCML_INIT_TIMEOUT":       {"30s", "-1s"},
	"SPARCML_CALIBRATE":          {"0", "maybe"},
	"SPARCML_SPARSE_AGREE_EVERY": {"4", "0"},
	"SPARCML_ON_PEER_LOSS":       {"revoke", "shrink"},
	"SPARCML_STALL_WARN":         {"10s", "later"},
	"SPARCML_DUMP_DIR":           {"/tmp", "/nonexistent-dir"},
	"SPARCML_FLIGHT_OPS":         {"64", "0"},
	"SPARCML_DEBUG":              {"info", "debug"},
	"SPARCML_DEBUG_SUBSYS":       {"^tcp", "graph"},
	"SPARCML_TCP_CONGESTION":     {"cubic", "bbr cubic"},
	"SPARCML_IB_DEV":             {"mlx5_0:1", "mlx5_0:x"},
	"SPARCML_IB_GID_INDEX":       {"3", "-2"},
	"SPARCML_RDMA_EAGER":         {"64K", "2M"},
	"SPARCML_RDMA_SPIN":          {"0", "fast"},
	"SPARCML_RDMA_WAIT_SPIN":     {"1ms", "-5us"},
	"SPARCML_RDMA_ADVERTISE":     {"0", "2"},
}

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestEveryVariableHasSamples(t *testing.T) {
	for _, v := range Vars {
		if _, ok := samples[v.Name]; !ok {
			t.Errorf("%s has no samples in this test", v.Name)
		}
		if v.Meaning == "" || v.Type == "" || v.DefaultText() == "" {
			t.Errorf("%s lacks a meaning, type or default in the table", v.Name)
		}
	}
	for name := range samples {
		if _, ok := Lookup(name); !ok {
			t.Errorf("samples name %s, which the table does not declare", name)
		}
	}
}

// An invalid value of every variable is rejected with an error naming the
// variable and the value.
func TestInvalidValueOfEveryVariableIsRejected(t *testing.T) {
	for _, v := range Vars {
		bad := samples[v.Name].invalid
		_, err := Load(env(map[string]string{v.Name: bad}))
		if err == nil {
			t.Errorf("%s=%q was accepted", v.Name, bad)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Name != v.Name {
			t.Errorf("%s=%q: error %v does not name the variable", v.Name, bad, err)
		}
		if !strings.Contains(err.Error(), v.Name+"="+strconv.Quote(bad)) {
			t.Errorf("%s=%q: error %q does not show the variable and the value", v.Name, bad, err)
		}
	}
}

// Every variable's valid sample loads, and every bad variable is reported
// at once.
func TestValidValuesAndErrorsTogether(t *testing.T) {
	all := map[string]string{}
	for _, v := range Vars {
		all[v.Name] = samples[v.Name].valid
	}
	if _, err := Load(env(all)); err != nil {
		t.Fatalf("valid samples rejected: %v", err)
	}
	_, err := Load(env(map[string]string{"SPARCML_TIMEOUT": "soon", "SPARCML_DEBUG": "debug"}))
	if err == nil || !strings.Contains(err.Error(), "SPARCML_TIMEOUT") || !strings.Contains(err.Error(), "SPARCML_DEBUG") {
		t.Errorf("two bad variables: %v, want both named", err)
	}
}

func TestDefaults(t *testing.T) {
	s, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Rank: -1, Size: -1, LocalRank: -1, LocalSize: -1, IBGIDIndex: -1,
		Transport: "auto", Timeout: 5 * time.Minute, InitTimeout: 2 * time.Minute, Calibrate: true, OnPeerLoss: "abort",
		StallWarn: time.Minute, FlightOps: 256, SparseAgreeEvery: 16,
		Debug: logging.Warn, DebugSubsys: logging.All, TCPCongestion: "auto", RDMAAdvertise: true,
	}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", *s, want)
	}
	if len(s.SetVars()) != 0 {
		t.Errorf("nothing set, but SetVars says %q", s.SetVars())
	}
}

func TestValuesParsed(t *testing.T) {
	s, err := Load(env(map[string]string{
		"SPARCML_TIMEOUT": " none ", "SPARCML_INIT_TIMEOUT": "1.5", "SPARCML_TRANSPORT": "RDMA",
		"SPARCML_RDMA_EAGER": "64K", "SPARCML_RDMA_SPIN": "0", "SPARCML_RDMA_WAIT_SPIN": "250us",
		"SPARCML_DEBUG": "trace", "SPARCML_DEBUG_SUBSYS": "coll,tcp", "SPARCML_TOKEN": "s3cret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeout != 0 || s.InitTimeout != 1500*time.Millisecond || s.Transport != "rdma" || s.RDMAEager != 65536 ||
		s.RDMASpin != -1 || s.RDMAWaitSpin != 250*time.Microsecond || s.Debug != logging.Trace ||
		s.DebugSubsys != logging.Coll|logging.TCP {
		t.Errorf("parsed %+v", *s)
	}
	set := strings.Join(s.SetVars(), " ")
	if strings.Contains(set, "s3cret") || !strings.Contains(set, "SPARCML_TOKEN=(set, not shown)") ||
		!strings.Contains(set, "SPARCML_RDMA_EAGER=64K") {
		t.Errorf("SetVars = %q: want every set variable, the token hidden", set)
	}
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"0": 0, "none": 0, "NONE": 0, "90": 90 * time.Second, "90s": 90 * time.Second, "2m": 2 * time.Minute,
		"0.25": 250 * time.Millisecond, "1h30m": 90 * time.Minute, "250us": 250 * time.Microsecond, " 5s ": 5 * time.Second,
	}
	for s, want := range good {
		got, err := ParseDuration(s)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "-1s", "Inf", "NaN", "1e300", "5 s", "soon"} {
		if got, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", bad, got)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int{"8192": 8192, "64K": 65536, "64KiB": 65536, "1M": 1 << 20, "1MB": 1 << 20} {
		got, err := parseBytes(s, 1, 1<<20)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "K", "-1", "1.5K", "2M", "0", "99999999999999999999G"} {
		if got, err := parseBytes(bad, 1, 1<<20); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", bad, got)
		}
	}
}

// docs/CONFIGURATION.md's two tables of variables are Markdown(false) and
// Markdown(true), each between its markers.
func TestConfigurationTables(t *testing.T) {
	path := filepath.Join(moduleRoot(t), configDoc)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	changed := false
	for _, table := range []struct {
		begin, end string
		advanced   bool
	}{
		{tableBegin, tableEnd, false},
		{advancedBegin, advancedEnd, true},
	} {
		begin := strings.Index(doc, table.begin)
		end := strings.Index(doc, table.end)
		if begin < 0 || end < begin {
			t.Fatalf("%s lacks the markers %q and %q around a table of variables", configDoc, table.begin, table.end)
		}
		begin += len(table.begin)
		want := "\n" + Markdown(table.advanced)
		if doc[begin:end] != want {
			doc, changed = doc[:begin]+want+doc[end:], true
		}
	}
	if !changed {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's tables of variables differ from Vars; run go test ./internal/config -update", configDoc)
}

// Every table holds some variables.
func TestBothTablesHoldVariables(t *testing.T) {
	for _, advanced := range []bool{false, true} {
		if strings.Count(Markdown(advanced), "\n") < 4 {
			t.Errorf("Markdown(%v) has fewer than two variables:\n%s", advanced, Markdown(advanced))
		}
	}
}

const (
	configDoc     = "docs/CONFIGURATION.md"
	tableBegin    = "<!-- variables: generated from internal/config/vars.go by `go test ./internal/config -update` -->"
	tableEnd      = "<!-- end of variables -->"
	advancedBegin = "<!-- advanced variables: generated from internal/config/vars.go by `go test ./internal/config -update` -->"
	advancedEnd   = "<!-- end of advanced variables -->"
)

// The SPARCML_* names the code mentions, the table and docs/CONFIGURATION.md
// are one set, and no package reads a SPARCML_* variable itself.
func TestCodeReadsOnlyTheTable(t *testing.T) {
	root := moduleRoot(t)
	re := regexp.MustCompile(`SPARCML_[A-Z0-9_]*[A-Z0-9]`)
	mentioned := map[string][]string{}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// test/ holds the test harnesses, whose own variables
		// (SPARCML_BIN, SPARCML_CLUSTER_*) configure tests, not the
		// runtime.
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == filepath.Join(root, "test")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		files[rel] = f
		// A variable is read, or set for a child, by its name: a string
		// literal that is the name, or "NAME=...". The C ABI's enum
		// constants (C.SPARCML_FLOAT32, and their names in error texts)
		// are not variables.
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					if name := re.FindString(v); name != "" && strings.HasPrefix(v, name) && (len(v) == len(name) || v[len(name)] == '=') {
						mentioned[name] = append(mentioned[name], rel)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, v := range Vars {
		table = append(table, v.Name)
	}
	for name, where := range mentioned {
		if _, gone := removed[name]; gone || readByOthers(name) {
			continue // named by Unknown, not read
		}
		if !slices.Contains(table, name) {
			t.Errorf("%s (in %s) is not declared in internal/config/vars.go", name, strings.Join(slices.Compact(where), ", "))
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, configDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range table {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s does not document %s", configDoc, name)
		}
	}
	// Only this package calls os.Getenv or os.LookupEnv with a SPARCML_*
	// name (the others get typed Settings).
	for rel, f := range files {
		if strings.HasPrefix(rel, filepath.Join("internal", "config")) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.HasPrefix(lit.Value, `"SPARCML_`) {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv") {
					t.Errorf("%s: %s reads %s itself; add it to the table and pass it in Settings", fset.Position(call.Pos()), sel.Sel.Name, lit.Value)
				}
			}
			return true
		})
	}
	// Every variable's field of Settings is read outside this package,
	// except those the library only writes for the application.
	// (the directory that writes them; "" for none).
	onlyWritten := map[string]string{
		"SPARCML_LOCAL_RANK": filepath.Join("internal", "launch"),
		"SPARCML_LOCAL_SIZE": filepath.Join("internal", "launch"),
	}
	used := map[string]bool{}
	for rel, f := range files {
		if strings.HasPrefix(rel, filepath.Join("internal", "config")) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				used[sel.Sel.Name] = true
			}
			return true
		})
	}
	for _, v := range Vars {
		if writer, ok := onlyWritten[v.Name]; ok {
			if writer != "" && !slices.ContainsFunc(mentioned[v.Name], func(f string) bool { return strings.HasPrefix(f, writer) }) {
				t.Errorf("%s is written by %s for the application, but that package does not mention it", v.Name, writer)
			}
			continue
		}
		for _, field := range fieldsOf(t, v) {
			if !used[field] {
				t.Errorf("%s is parsed into Settings.%s, which no package reads", v.Name, field)
			}
		}
	}
}

// fieldsOf finds the fields of Settings that v's valid sample changes.
func fieldsOf(t *testing.T, v Var) []string {
	base, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Load(env(map[string]string{v.Name: samples[v.Name].valid}))
	if err != nil {
		t.Fatalf("%s=%q: %v", v.Name, samples[v.Name].valid, err)
	}
	var fields []string
	a, b := reflect.ValueOf(*base), reflect.ValueOf(*set)
	for i := 0; i < a.NumField(); i++ {
		f := a.Type().Field(i)
		if f.IsExported() && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			fields = append(fields, f.Name)
		}
	}
	if len(fields) == 0 {
		t.Errorf("%s=%q changes no field of Settings", v.Name, samples[v.Name].valid)
	}
	return fields
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// A SPARCML_* name the table does not declare gets one warning naming the
// closest declared one; a removed variable names its replacement; the
// declared variables and those of the Python package and the test
// harnesses get none.
func TestUnknownVariables(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin", "SPARCML_TIMEOUT=5m", "SPARCML_TIMEOT=5m", "SPARCML_TRANSPROT=tcp",
		"SPARCML_INIT_TIMEOUTS=1m", "SPARCML_LOG=off", "SPARCML_LIBRARY=/x.so", "SPARCML_BIN=/bin/sparcml",
		"SPARCML_CLUSTER_UDP=1", "SPARCML_VM_MEM=2G", "SPARCML_TEST_TRANSPORT=tcp", "NOT_SPARCML_TIMEOT=1",
	}
	got := Unknown(environ)
	want := []string{
		"SPARCML_TIMEOT is not a sparcml variable and is ignored; did you mean SPARCML_TIMEOUT?",
		"SPARCML_TRANSPROT is not a sparcml variable and is ignored; did you mean SPARCML_TRANSPORT?",
		"SPARCML_INIT_TIMEOUTS is not a sparcml variable and is ignored; did you mean SPARCML_INIT_TIMEOUT?",
		"SPARCML_LOG is no longer read: use SPARCML_DEBUG=NONE",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Unknown:\n got %q\nwant %q", got, want)
	}
	for _, v := range Vars {
		if w := Unknown([]string{v.Name + "=" + samples[v.Name].valid}); len(w) != 0 {
			t.Errorf("declared %s warned: %q", v.Name, w)
		}
	}
	for name := range removed {
		if _, ok := Lookup(name); ok {
			t.Errorf("%s is both declared and listed as removed", name)
		}
	}
}

// editDistance against a reference: the distance is symmetric, zero only
// between equal strings, and one for a single insertion, deletion or
// substitution.
func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2},
		{"SPARCML_SIZE", "SPARCML_SIZE", 0}, {"SPARCML_SIZ", "SPARCML_SIZE", 1}, {"SPARCML_SIXE", "SPARCML_SIZE", 1},
		{"SPARCML_TRANSPROT", "SPARCML_TRANSPORT", 2},
	} {
		if got, back := editDistance(tc.a, tc.b), editDistance(tc.b, tc.a); got != tc.want || back != tc.want {
			t.Errorf("editDistance(%q, %q) = %d (%d reversed), want %d", tc.a, tc.b, got, back, tc.want)
		}
	}
}
