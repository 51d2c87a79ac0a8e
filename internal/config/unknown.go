package config

import (
	"fmt"
	"strings"
)

// removed are variables that sparcml no longer reads, with what replaced
// them, so that a job still setting one is told what to do instead.
var removed = map[string]string{
	"SPARCML_LOG":        "use SPARCML_DEBUG=NONE",
	"SPARCML_PROGRESS":   "use the --progress flag of sparcml bench and sparcml train",
	"SPARCML_CPUPROFILE": "use sparcml bench --cpuprofile",
	"SPARCML_MEMPROFILE": "use sparcml bench --memprofile",
	"SPARCML_TRACE":      "use sparcml bench --trace (the log level is SPARCML_DEBUG=TRACE)",
}

// othersPrefixes name the SPARCML_* variables that other programs read:
// the Python package (SPARCML_LIBRARY), its wheel build (SPARCML_VERSION,
// python/setup.py), scripts/venv.sh (SPARCML_VENV*) and the test harnesses
// under test/, capi/ and python/tests (SPARCML_BIN, SPARCML_STAGE,
// SPARCML_TEST*, SPARCML_CLUSTER*, SPARCML_VM*).
var othersPrefixes = []string{"SPARCML_LIBRARY", "SPARCML_VERSION", "SPARCML_VENV", "SPARCML_BIN", "SPARCML_STAGE",
	"SPARCML_TEST", "SPARCML_CLUSTER", "SPARCML_VM"}

// Unknown returns one warning for each SPARCML_* variable of environ
// (os.Environ's NAME=value form) that Vars does not declare: a removed
// variable is named with its replacement, any other with the closest
// declared name (by edit distance), which a typing mistake usually is.
func Unknown(environ []string) []string {
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SPARCML_") || readByOthers(name) {
			continue
		}
		if _, ok := Lookup(name); ok {
			continue
		}
		if instead, ok := removed[name]; ok {
			warnings = append(warnings, fmt.Sprintf("%s is no longer read: %s", name, instead))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s is not a sparcml variable and is ignored; did you mean %s?", name, closest(name)))
	}
	return warnings
}

func readByOthers(name string) bool {
	for _, p := range othersPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// closest is the declared name nearest to name by edit distance, the
// first in table order among equals.
func closest(name string) string {
	best, bestDist := "", -1
	for _, v := range Vars {
		if d := editDistance(name, v.Name); bestDist < 0 || d < bestDist {
			best, bestDist = v.Name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b: the fewest
// insertions, deletions and substitutions of bytes that turn a into b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
