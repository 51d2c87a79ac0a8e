// Command jsonplot draws the records `sparcml train --format json` wrote
// (one JSON object per evaluation) to a PNG: test accuracy and loss
// against epochs (top) and against the bytes each rank sent (bottom,
// log scale), one line per variant, from the first evaluation after a
// step (the evaluation before training, the same for every variant,
// would set the scale). Unlike `sparcml train --plot`, it can
// put runs of several commands side by side; bytes, unlike wall time,
// do not depend on what else ran on the machine.
//
//	go run ./train/plot/jsonplot -o conv.png -title "..." \
//	    -variants dense,topk:0.01+nomask,topk:0.01+nomask+global a.jsonl b.jsonl
//
// A file given as FILE.jsonl:LABEL has LABEL appended to the names of its
// variants, for runs of one variant under other flags (a warm-up, a seed):
// b.jsonl:" warm-up 4" draws "topk:0.01+nomask+global warm-up 4".
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/sparcml/sparcml/train"
	"github.com/sparcml/sparcml/train/plot"
)

func main() {
	out := flag.String("o", "training.png", "the PNG to write")
	title := flag.String("title", "", "the figure's title")
	only := flag.String("variants", "", "comma-separated variants to draw, in this order (default: every variant, in the order first seen)")
	flag.Parse()
	if err := run(*out, *title, *only, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "jsonplot:", err)
		os.Exit(1)
	}
}

func run(out, title, only string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no record files given")
	}
	byVariant := map[string][]train.Record{}
	from := map[string]string{}
	var order []string
	for _, arg := range files {
		f, label := arg, ""
		if i := strings.LastIndex(arg, ".jsonl:"); i >= 0 {
			f, label = arg[:i+len(".jsonl")], arg[i+len(".jsonl:"):]
		}
		recs, err := read(f)
		if err != nil {
			return err
		}
		for _, r := range recs {
			r.Variant += label
			switch from[r.Variant] {
			case "":
				from[r.Variant] = arg
				order = append(order, r.Variant)
			case arg:
			default:
				return fmt.Errorf("variant %q is in both %s and %s: give one run of each, or a label (FILE.jsonl:LABEL)", r.Variant, from[r.Variant], arg)
			}
			byVariant[r.Variant] = append(byVariant[r.Variant], r)
		}
	}
	if only != "" {
		order = strings.Split(only, ",")
		for _, v := range order {
			if byVariant[v] == nil {
				return fmt.Errorf("no records of variant %q", v)
			}
		}
	}
	var acc, loss, accB, lossB []plot.Series
	for _, v := range order {
		a, l, ab, lb := plot.Series{Name: v}, plot.Series{Name: v}, plot.Series{Name: v}, plot.Series{Name: v}
		recs := byVariant[v]
		slices.SortStableFunc(recs, func(x, y train.Record) int { return x.Step - y.Step })
		for _, r := range recs {
			if r.Step == 0 {
				continue
			}
			a.X, a.Y = append(a.X, r.Epoch), append(a.Y, 100*r.TestAccuracy)
			l.X, l.Y = append(l.X, r.Epoch), append(l.Y, r.TestLoss)
			mib := math.Log10(r.BytesSent / (1 << 20))
			ab.X, ab.Y = append(ab.X, mib), append(ab.Y, 100*r.TestAccuracy)
			lb.X, lb.Y = append(lb.X, mib), append(lb.Y, r.TestLoss)
		}
		acc, loss, accB, lossB = append(acc, a), append(loss, l), append(accB, ab), append(lossB, lb)
	}
	return plot.Write(out, title, []plot.Panel{
		{Title: "test accuracy (%)", XLabel: "epoch", Series: acc},
		{Title: "test loss", XLabel: "epoch", Series: loss},
		{Title: "test accuracy (%)", XLabel: "log10 MiB sent per rank", Series: accB},
		{Title: "test loss", XLabel: "log10 MiB sent per rank", Series: lossB},
	})
}

// read returns the records of one file, one JSON object a line.
func read(path string) ([]train.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []train.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] != '{' {
			continue
		}
		var r train.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
