package train

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Reporter writes evaluations as a table or as JSON lines.
type Reporter struct {
	w      io.Writer
	json   bool
	header bool
}

// NewReporter writes to w in format "table" or "json".
func NewReporter(w io.Writer, format string) *Reporter {
	return &Reporter{w: w, json: format == "json"}
}

const tableHeader = "%-22s %6s %7s %10s %9s %8s %8s %9s %8s %12s\n"
const tableRow = "%-22s %6.2f %7d %10s %9.4f %7.2f%% %8.1f %9.1f %8.1f %12s\n"

// Record writes one evaluation.
func (r *Reporter) Record(rec Record) {
	if r.json {
		b, _ := json.Marshal(rec)
		fmt.Fprintf(r.w, "%s\n", b)
		return
	}
	if !r.header {
		r.header = true
		fmt.Fprintf(r.w, tableHeader, "variant", "epoch", "step", "train_loss", "test_loss", "test_acc", "time_s", "compute_s", "comm_s", "sent/rank")
	}
	tl := "-"
	if rec.TrainLoss != nil {
		tl = fmt.Sprintf("%.4f", *rec.TrainLoss)
	}
	fmt.Fprintf(r.w, tableRow, rec.Variant, rec.Epoch, rec.Step, tl, rec.TestLoss, 100*rec.TestAccuracy,
		rec.TimeS, rec.ComputeS, rec.CommS, Bytes(rec.BytesSent))
}

// Note writes a comment line (tables only: JSON output stays one record
// a line).
func (r *Reporter) Note(format string, args ...any) {
	if !r.json {
		fmt.Fprintf(r.w, "# "+format+"\n", args...)
	}
}

// Summary writes the final evaluation of each run of a comparison, with
// each run's accuracy and loss against the first's and the time it took
// to reach the first run's final accuracy.
func (r *Reporter) Summary(results []*Result) {
	if r.json || len(results) < 2 {
		return
	}
	base := results[0].Final()
	fmt.Fprintf(r.w, "\n%-22s %9s %8s %9s %10s %8s %12s %10s %s\n", "variant", "test_acc", "vs_first", "test_loss", "vs_first", "time_s", "sent/rank", "bytes_x", "time to first's accuracy")
	for _, res := range results {
		f := res.Final()
		reach := "never"
		for _, rec := range res.Records {
			if rec.TestAccuracy >= base.TestAccuracy {
				reach = fmt.Sprintf("%.1f s (epoch %.2f)", rec.TimeS, rec.Epoch)
				break
			}
		}
		ratio := "-"
		if f.BytesSent > 0 {
			ratio = fmt.Sprintf("%.1fx", base.BytesSent/f.BytesSent)
		}
		fmt.Fprintf(r.w, "%-22s %8.2f%% %+7.2f  %9.4f %+9.2f%% %8.1f %12s %10s %s\n", f.Variant, 100*f.TestAccuracy,
			100*(f.TestAccuracy-base.TestAccuracy), f.TestLoss, 100*(f.TestLoss-base.TestLoss)/base.TestLoss,
			f.TimeS, Bytes(f.BytesSent), ratio, reach)
	}
}

// Bytes formats a byte count with a binary unit.
func Bytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

// Progress draws a progress bar on a terminal, redrawn in place at most
// every 200 ms.
type Progress struct {
	W     io.Writer
	Label string
	start time.Time
	last  time.Time
}

// Show draws done of total steps.
func (p *Progress) Show(done, total int) {
	now := time.Now()
	if p.start.IsZero() || done <= 1 {
		p.start = now
	}
	if now.Sub(p.last) < 200*time.Millisecond && done < total {
		return
	}
	p.last = now
	const width = 30
	frac := float64(done) / float64(max(total, 1))
	bar := strings.Repeat("#", int(frac*width)) + strings.Repeat(".", width-int(frac*width))
	eta := ""
	if done > 0 && done < total {
		left := time.Duration(float64(now.Sub(p.start)) / float64(done) * float64(total-done))
		eta = " eta " + left.Round(time.Second).String()
	}
	fmt.Fprintf(p.W, "\r\033[K%s [%s] %3.0f%% step %d/%d%s", p.Label, bar, 100*frac, done, total, eta)
}

// Clear erases the bar, before a table row is written.
func (p *Progress) Clear() { fmt.Fprint(p.W, "\r\033[K") }
