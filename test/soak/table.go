//go:build linux

package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"time"
)

// row sums the trials of one job size whose kill landed in one phase.
type row struct {
	trials, clean, hung, zero, misnamed, late, left int
	byHand                                          int
	worst                                           []time.Duration
}

type table struct {
	rows map[[2]string]*row // job size, phase
}

func newTable() *table { return &table{rows: map[[2]string]*row{}} }

func (t *table) add(r *result) {
	k := [2]string{fmt.Sprint(r.p), r.landed}
	rw := t.rows[k]
	if rw == nil {
		rw = &row{}
		t.rows[k] = rw
	}
	rw.trials++
	if r.clean() {
		rw.clean++
	}
	if r.byHand {
		rw.byHand++
	}
	rw.hung += b2i(r.hung > 0)
	rw.zero += b2i(r.zero > 0)
	rw.misnamed += b2i(r.misnamed > 0)
	rw.late += b2i(r.late > 0)
	rw.left += b2i(len(r.left) > 0)
	rw.worst = append(rw.worst, r.worst)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (t *table) total() int {
	n := 0
	for _, r := range t.rows {
		n += r.trials
	}
	return n
}

func (t *table) clean() int {
	n := 0
	for _, r := range t.rows {
		n += r.clean
	}
	return n
}

func (t *table) allClean() bool {
	for _, r := range t.rows {
		if r.clean != r.trials {
			return false
		}
	}
	return true
}

var phaseOrder = []string{landedBeforeStore, landedInit, landedStartUp}

// print writes the table in Markdown: per job size and phase, the trials
// (of them by hand, the others under sparcml run), the clean ones, those
// with a hung survivor, one that exited 0, one that did not name the
// victim, one past the bound, something left behind, and the median and
// worst of each trial's slowest survivor's detection time.
func (t *table) print(w io.Writer) {
	keys := make([][2]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	rank := func(ph string) int {
		if i := slices.Index(phaseOrder, ph); i >= 0 {
			return i
		}
		return len(phaseOrder)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a[0] != b[0] {
			return len(a[0]) < len(b[0]) || (len(a[0]) == len(b[0]) && a[0] < b[0])
		}
		if rank(a[1]) != rank(b[1]) {
			return rank(a[1]) < rank(b[1])
		}
		return a[1] < b[1]
	})
	fmt.Fprintln(w, "| P | kill landed in | trials (by hand) | clean | hung | exited 0 | misnamed | late | left behind | median detection | worst detection |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, k := range keys {
		r := t.rows[k]
		slices.Sort(r.worst)
		fmt.Fprintf(w, "| %s | %s | %d (%d) | %d | %d | %d | %d | %d | %d | %v | %v |\n", k[0], k[1], r.trials, r.byHand,
			r.clean, r.hung, r.zero, r.misnamed, r.late, r.left, round(r.worst[len(r.worst)/2]), round(r.worst[len(r.worst)-1]))
	}
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}
