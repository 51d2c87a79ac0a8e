package data

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// FileError is an error in a data file: the file, the line (or record)
// when known, and what is wrong.
type FileError struct {
	File string
	Line int64  // 1-based line of a text file; 0: not about one line
	Unit string // "line" (the default) or "record"
	Err  error
}

func (e *FileError) Error() string {
	switch {
	case e.Line > 0 && (e.Unit == "" || e.Unit == "line"):
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	case e.Line > 0:
		return fmt.Sprintf("%s %s %d: %v", e.File, e.Unit, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// ErrFormat is wrapped by every error about the content of a data file.
var ErrFormat = errors.New("bad data")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}

// isSpace is the LIBSVM separator: space, tab, and the carriage return of
// files written on Windows.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// isSample reports whether a line holds a sample (not blank, not a
// comment).
func isSample(line []byte) bool {
	for _, c := range line {
		if !isSpace(c) {
			return c != '#'
		}
	}
	return false
}

// parseLIBSVM parses one sample line "label index:value ..." (indices
// 1-based and strictly increasing, an optional "# comment" at the end,
// "qid:N" tokens of the ranking variant skipped), appends its features
// (0-based) to idx and val, and returns the label and the largest index.
// dim > 0 bounds the indices.
func parseLIBSVM(line []byte, dim int, idx []uint32, val []float32) (label int32, maxIndex int, _ []uint32, _ []float32, err error) {
	i := 0
	tok := func() []byte {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i < len(line) && line[i] == '#' {
			i = len(line)
		}
		s := i
		for i < len(line) && !isSpace(line[i]) && line[i] != '#' {
			i++
		}
		return line[s:i]
	}
	lt := tok()
	if len(lt) == 0 {
		return 0, 0, idx, val, formatErr("no label")
	}
	lv, ok := parseFloat(lt)
	if !ok {
		if bytesContain(lt, ',') {
			return 0, 0, idx, val, formatErr("multi-label %q is not supported (want one class per sample)", lt)
		}
		return 0, 0, idx, val, formatErr("label %q is not a number", lt)
	}
	if lv != math.Trunc(lv) || math.Abs(lv) > math.MaxInt32 {
		return 0, 0, idx, val, formatErr("label %q is not a class number (want an integer: +1/-1, 0/1 or 0..K-1)", lt)
	}
	prev := 0
	for {
		t := tok()
		if len(t) == 0 {
			break
		}
		colon := -1
		for j, c := range t {
			if c == ':' {
				colon = j
				break
			}
		}
		if colon < 0 {
			return 0, 0, idx, val, formatErr("feature %q is not index:value", t)
		}
		if string(t[:colon]) == "qid" {
			continue
		}
		ix, ok := parseIndex(t[:colon])
		if !ok {
			return 0, 0, idx, val, formatErr("feature index %q is not a positive integer", t[:colon])
		}
		if ix == 0 {
			return 0, 0, idx, val, formatErr("feature index 0 (LIBSVM indices start at 1)")
		}
		if ix <= prev {
			return 0, 0, idx, val, formatErr("feature index %d after %d (indices must increase)", ix, prev)
		}
		if ix > math.MaxUint32 {
			return 0, 0, idx, val, formatErr("feature index %d does not fit 32 bits", ix)
		}
		if dim > 0 && ix > dim {
			return 0, 0, idx, val, formatErr("feature index %d beyond the dimension %d", ix, dim)
		}
		v, ok := parseFloat(t[colon+1:])
		if !ok || math.IsInf(v, 0) || math.IsNaN(v) || math.Abs(v) > math.MaxFloat32 {
			return 0, 0, idx, val, formatErr("feature value %q is not a finite number", t[colon+1:])
		}
		prev = ix
		idx = append(idx, uint32(ix-1))
		val = append(val, float32(v))
	}
	return int32(lv), prev, idx, val, nil
}

func bytesContain(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// parseIndex reads a decimal integer of at most 12 digits.
func parseIndex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 12 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseFloat reads a decimal number. Plain decimals of up to 15
// significant digits and small exponents, nearly every value in LIBSVM
// files, take a fast path that is exact (the mantissa and the power of
// ten are exact doubles, so one rounding); everything else goes to
// strconv.
func parseFloat(b []byte) (float64, bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	var mant uint64
	digits, frac, exp := 0, 0, 0
	seen := false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		seen = true
		if mant == 0 && b[i] == '0' {
			continue
		}
		mant = mant*10 + uint64(b[i]-'0')
		digits++
	}
	if i < len(b) && b[i] == '.' {
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			seen = true
			frac++
			if mant == 0 && b[i] == '0' {
				continue
			}
			mant = mant*10 + uint64(b[i]-'0')
			digits++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		j := i + 1
		eneg := false
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			eneg = b[j] == '-'
			j++
		}
		if j == len(b) {
			return 0, false
		}
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if exp < 10000 {
				exp = exp*10 + int(b[j]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
		i = j
	}
	if i == len(b) && seen && digits <= 15 {
		e := exp - frac
		v := float64(mant)
		switch {
		case e == 0:
		case e > 0 && e < len(pow10):
			v *= pow10[e]
		case e < 0 && -e < len(pow10):
			v /= pow10[-e]
		default:
			return slowFloat(b)
		}
		if neg {
			v = -v
		}
		return v, true
	}
	return slowFloat(b)
}

func slowFloat(b []byte) (float64, bool) {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return v, true // ±Inf or 0: the caller judges
		}
		return 0, false
	}
	return v, true
}
