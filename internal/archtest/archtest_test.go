package archtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const module = "github.com/sparcml/sparcml"

// rootName is how ARCHITECTURE.md names the module root's package.
const rootName = "sparcml"

var docPath = filepath.Join("..", "..", "docs", "ARCHITECTURE.md")

// TestImportGraphMatchesDoc compares the edges of ARCHITECTURE.md's
// fenced `edges` block ("a -> b": package a imports package b, both of
// this module, in a non-test file of the default build) with `go list`.
func TestImportGraphMatchesDoc(t *testing.T) {
	_, code := goListGraph(t)
	doc, err := docEdges(docPath)
	if err != nil {
		t.Fatal(err)
	}
	missing, extra := diff(code, doc)
	for _, e := range missing {
		t.Errorf("the code has the edge %s; add it to ARCHITECTURE.md's edges block", e)
	}
	for _, e := range extra {
		t.Errorf("ARCHITECTURE.md lists the edge %s, which the code does not have", e)
	}
}

// TestPackageTableMatchesDoc: every package of the module has a row in
// ARCHITECTURE.md's table of packages, and every package the table names
// exists.
func TestPackageTableMatchesDoc(t *testing.T) {
	pkgs, _ := goListGraph(t)
	table, err := docPackages(docPath)
	if err != nil {
		t.Fatal(err)
	}
	missing, extra := diff(pkgs, table)
	for _, p := range missing {
		t.Errorf("package %s has no row in ARCHITECTURE.md's table", p)
	}
	for _, p := range extra {
		t.Errorf("ARCHITECTURE.md's table names %s, which is no package of the module", p)
	}
}

// goListGraph returns the module's packages and the edges between them,
// as `go list` gives them, in the doc's naming.
func goListGraph(t *testing.T) (pkgs, edges []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(goList(t, `{{.ImportPath}} {{join .Imports " "}}`)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		from := docName(f[0])
		pkgs = append(pkgs, from)
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				edges = append(edges, from+" -> "+docName(imp))
			}
		}
	}
	return pkgs, edges
}

// goList runs `go list -f format` over the module's packages and returns
// its output, a line per package.
func goList(t *testing.T, format string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "list", "-f", format, module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	return out
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// docName is a package's name in the doc: its path in the module, the
// root being rootName.
func docName(importPath string) string {
	if importPath == module {
		return rootName
	}
	return strings.TrimPrefix(importPath, module+"/")
}

var edgeLine = regexp.MustCompile(`^(\S+) -> (\S+)$`)

// docEdges reads the fenced block opened by "```edges".
func docEdges(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var edges []string
	in, found := false, false
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "```edges":
			in, found = true, true
		case in && line == "```":
			in = false
		case in && line != "":
			m := edgeLine.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: %q is not an edge \"a -> b\"", path, i+1, line)
			}
			edges = append(edges, m[1]+" -> "+m[2])
		}
	}
	if !found {
		return nil, fmt.Errorf("%s has no ```edges block", path)
	}
	return edges, nil
}

var tableName = regexp.MustCompile("`([^`]+)`")

// docPackages reads the package names of the table's first column: the
// rows between the header "| package | one job |" and the first line
// after it that is not a row.
func docPackages(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| package | one job |"):
			in = true
		case in && strings.HasPrefix(line, "| ---"):
		case in && strings.HasPrefix(line, "|"):
			cell := strings.Split(line, "|")[1]
			for _, m := range tableName.FindAllStringSubmatch(cell, -1) {
				names = append(names, m[1])
			}
		case in:
			in = false
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s has no table under \"| package | one job |\"", path)
	}
	return names, nil
}

// diff returns what is in want and not in got, and what is in got and not
// in want, each sorted without repeats.
func diff(want, got []string) (missing, extra []string) {
	w, g := set(want), set(got)
	for s := range w {
		if !g[s] {
			missing = append(missing, s)
		}
	}
	for s := range g {
		if !w[s] {
			extra = append(extra, s)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
