// Package benchio is what the emulated cluster's benchmark commands
// (benchcluster, benchtorch, benchtrain and plot) share: reading the JSON
// rows that rank 0 prints among its log lines, writing them with the
// run's context added, and that context (the tree, the load).
package benchio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Rows decodes every line of out that holds a JSON object; the other
// lines are logs. Output without one is an error, as is a bad object.
func Rows(out string) ([]map[string]any, error) {
	var rows []map[string]any
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var row map[string]any
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			return nil, fmt.Errorf("bad JSON line %q: %v", l, err)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, errors.New("no JSON row in the output:\n" + out)
	}
	return rows, nil
}

// line is row with extra's keys set, as one JSON line (newline included).
// row is changed in place.
func line(row, extra map[string]any) ([]byte, error) {
	for k, v := range extra {
		row[k] = v
	}
	b, err := json.Marshal(row)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Append writes every row of out to w with extra's keys set, and returns
// the lines written.
func Append(w io.Writer, out string, extra map[string]any) ([][]byte, error) {
	rows, err := Rows(out)
	if err != nil {
		return nil, err
	}
	lines := make([][]byte, 0, len(rows))
	for _, row := range rows {
		l, err := line(row, extra)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// Load is the 1-minute load average from /proc/loadavg ("" if unreadable),
// recorded beside every figure since these machines are shared.
func Load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Commit names the tree a figure was measured on (git describe --always
// --dirty; "" outside a git tree).
func Commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Median of v; 0 when v is empty.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Abs makes every path absolute in place, since the ranks run in other
// directories.
func Abs(paths ...*string) error {
	for _, p := range paths {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}
