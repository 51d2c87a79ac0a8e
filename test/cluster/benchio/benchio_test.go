package benchio

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendKeepsRowsAddsExtraSkipsLogs(t *testing.T) {
	out := "a log line\n{\"op\":\"allreduce\",\"us\":12.5}\n  {\"op\":\"sparse\",\"round\":1}\nbye\n"
	var w bytes.Buffer
	lines, err := Append(&w, out, map[string]any{"hosts": 8, "round": 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || w.String() != string(lines[0])+string(lines[1]) {
		t.Fatalf("lines %q, written %q", lines, w.String())
	}
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(w.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if rows[0]["op"] != "allreduce" || rows[0]["us"] != 12.5 || rows[0]["hosts"] != 8.0 || rows[1]["op"] != "sparse" || rows[1]["round"] != 2.0 {
		t.Fatalf("rows %v", rows)
	}
}

func TestRowsRejectsBadAndEmptyOutput(t *testing.T) {
	if _, err := Rows("only logs\n"); err == nil {
		t.Error("output without a row: no error")
	}
	if _, err := Rows("{\"a\": 1}\n{\"b\": \n"); err == nil {
		t.Error("a truncated row: no error")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), c.v...)
		if got := Median(c.v); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.v, got, c.want)
		}
		for i := range in {
			if in[i] != c.v[i] {
				t.Errorf("Median reordered its input: %v", c.v)
			}
		}
	}
}
