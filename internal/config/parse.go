package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration is the one duration syntax of every SPARCML_* variable: a
// Go duration ("90s", "1m30s", "250us"), a plain number of seconds ("90",
// "1.5"), or "0" or "none" for zero (no deadline, no spinning: each
// variable says what zero means). Negative, infinite and overflowing
// values are errors.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "none") {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, errors.New(`not a duration (want e.g. "90s", "2m", "250us", or seconds "90")`)
		}
		if math.Abs(secs) > float64(math.MaxInt64)/float64(time.Second) {
			return 0, errors.New("duration out of range")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, errors.New("negative duration")
	}
	return d, nil
}

// parseBool accepts 1/0, true/false, yes/no, on/off in any case.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, errors.New("not a boolean (want 1 or 0; true/false, yes/no and on/off also work)")
}

// parseInt reads a decimal integer in [lo, hi].
func parseInt(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("out of range %d..%d", lo, hi)
	}
	return n, nil
}

// parseBytes reads a byte count in [lo, hi]: an integer, optionally with
// K, M or G (binary: 64K is 65536), with or without "iB".
func parseBytes(s string, lo, hi int) (int, error) {
	num := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	mult := 1
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			num = num[:n-1]
		}
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 0 || v > math.MaxInt/mult {
		return 0, errors.New("not a byte count (want e.g. 8192, 64K)")
	}
	if v*mult < lo || v*mult > hi {
		return 0, fmt.Errorf("out of range %d..%d bytes", lo, hi)
	}
	return v * mult, nil
}

// oneOf returns the entry of choices s names, in any case.
func oneOf(s string, choices ...string) (string, error) {
	for _, c := range choices {
		if strings.EqualFold(s, c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("want one of %s", strings.Join(choices, ", "))
}
