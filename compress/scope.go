package compress

import (
	"fmt"
	"strings"
)

// Scope is what a compressed reduction keeps of the ranks' selections.
// The two are different operations (the global one is lossy on top of the
// local selection), so nothing switches from one to the other on its own.
type Scope uint8

const (
	// ScopeUnion (the zero value) sums every rank's selected entries
	// exactly: the result holds the union of the selections, up to P·k
	// entries, and tends to dense as P grows.
	ScopeUnion Scope = iota
	// ScopeGlobal keeps about k of those sums, the largest in magnitude
	// over every rank (Ok-Topk's global top-k, collectives.GlobalTopk):
	// the volume stays near 2k entries per rank whatever P, and what the
	// global selection drops goes back into each sender's residual.
	ScopeGlobal
)

var scopeNames = [...]string{ScopeUnion: "union", ScopeGlobal: "global"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Valid says whether s is a known scope.
func (s Scope) Valid() bool { return int(s) < len(scopeNames) }

// ParseScope parses a scope name as printed by Scope.String.
func ParseScope(s string) (Scope, error) {
	for i, n := range scopeNames {
		if strings.EqualFold(s, n) {
			return Scope(i), nil
		}
	}
	return ScopeUnion, fmt.Errorf("%w: unknown scope %q (want %s)", ErrInvalid, s, strings.Join(scopeNames[:], ", "))
}
