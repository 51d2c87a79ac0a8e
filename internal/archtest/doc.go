// Package archtest holds the test that keeps docs/ARCHITECTURE.md true:
// its list of import edges between the module's packages, and its table of
// packages, must be what `go list` says of the code.
package archtest
