// Package archtest holds the tests that keep docs/ARCHITECTURE.md true:
// its list of import edges between the module's packages, and its table of
// packages, must be what `go list` says of the code; and only the public
// API (with the programs and the launcher) reads the environment.
package archtest
