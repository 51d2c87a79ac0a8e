package archtest

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// envReaders may read the process's environment: the public API, which
// hands what it read to the packages below it, the programs, and the
// launcher, which forwards its own environment to the ranks it starts.
var envReaders = map[string]bool{
	rootName:          true,
	"internal/launch": true,
}

var readsEnv = regexp.MustCompile(`\bos\.(Getenv|LookupEnv|Environ)\(`)

// TestOnlyTheAPIReadsTheEnvironment: every SPARCML_* variable is read once,
// by internal/config through the getenv the API passes it, so no other
// library package calls os.Getenv, os.LookupEnv or os.Environ.
func TestOnlyTheAPIReadsTheEnvironment(t *testing.T) {
	out := goList(t, `{{.ImportPath}} {{.Dir}} {{join .GoFiles " "}} {{join .CgoFiles " "}}`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	checked := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		pkg, dir := docName(f[0]), f[1]
		if envReaders[pkg] || strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "test/") {
			continue
		}
		for _, name := range f[2:] {
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for i, line := range strings.Split(string(src), "\n") {
				if readsEnv.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
					t.Errorf("%s/%s:%d reads the environment; take the value through the API's getenv (internal/config) instead", pkg, name, i+1)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("go list named no source files")
	}
}
