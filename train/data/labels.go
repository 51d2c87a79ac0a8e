package data

import (
	"fmt"
	"math"
)

// LabelSummary describes the labels of one rank's sets as written in the
// file: the smallest and largest and whether 0 occurs. The ranks combine
// their summaries (min of Min, max of Max, or of Zero) before deciding
// the convention, since a shard may hold only some of the labels.
type LabelSummary struct {
	Min, Max int64
	Zero     bool
	N        int // samples summarized
}

// Summarize returns the summary of the labels of sets (nil sets skipped).
func Summarize(sets ...*Set) LabelSummary {
	s := LabelSummary{Min: math.MaxInt64, Max: math.MinInt64}
	for _, set := range sets {
		if set == nil {
			continue
		}
		for _, l := range set.Labels {
			s.Min, s.Max = min(s.Min, int64(l)), max(s.Max, int64(l))
			s.Zero = s.Zero || l == 0
			s.N++
		}
	}
	return s
}

// Labeling maps labels as written to classes [0, Classes).
type Labeling struct {
	PlusMinus bool // binary labels written -1/+1: -1 -> 0, +1 -> 1
	Classes   int
	declared  bool
}

// DecideLabels picks the convention from the summary of every rank's
// labels: negative labels without 0 mean -1/+1 binary data (-1 is
// class 0, and any other label is out of range); otherwise labels are
// class numbers 0..K-1 (0/1 binary, a 1-based set leaves class 0
// unused) with K the largest label plus one, or declared when
// declared > 0. Labels that fit neither are reported by Apply, on the
// rank that holds them.
func DecideLabels(all LabelSummary, declared int) Labeling {
	l := Labeling{Classes: declared, declared: declared > 0}
	if all.N > 0 && all.Min < 0 && !all.Zero {
		l.PlusMinus = true
		if !l.declared {
			l.Classes = 2
		}
		return l
	}
	if !l.declared {
		l.Classes = int(max(all.Max+1, 2))
		if all.N == 0 {
			l.Classes = 2
		}
	}
	return l
}

// Apply maps set's labels to classes, or names the first sample whose
// label fits neither the convention nor the number of classes.
func (l Labeling) Apply(s *Set) error {
	if s == nil {
		return nil
	}
	for r, y := range s.Labels {
		c := y
		if l.PlusMinus {
			c = 0
			if y == 1 {
				c = 1
			}
		}
		var why string
		switch {
		case l.PlusMinus && y != 1 && y != -1:
			why = fmt.Sprintf("label %d out of range (the file's labels are -1/+1 binary)", y)
		case c < 0:
			why = fmt.Sprintf("label %d out of range (class labels are 0..K-1, or -1/+1 for binary data)", y)
		case int(c) >= l.Classes && l.declared:
			why = fmt.Sprintf("label %d out of range (%d classes declared)", y, l.Classes)
		case int(c) >= l.Classes:
			why = fmt.Sprintf("label %d out of range (%d classes)", y, l.Classes)
		}
		if why != "" {
			return fmt.Errorf("%s: %w: %s", s.Where(r), ErrFormat, why)
		}
		s.Labels[r] = c
	}
	s.Classes = l.Classes
	return nil
}
