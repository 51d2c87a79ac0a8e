// Package version is the one source of the build's version: the
// library's start-up line, `sparcml version` and the C ABI's
// sparcml_build_version all report String. The Makefile sets Version
// (and Commit) with
//
//	-ldflags "-X github.com/sparcml/sparcml/internal/version.Version=$(git describe)"
package version

import (
	"runtime/debug"
	"strings"
)

// Version is the build's version, set with -ldflags -X; empty in a plain
// go build or when sparcml is a dependency.
var Version string

// Commit is the commit the build was made from, set with -ldflags -X for
// builds without VCS stamping (-buildvcs=false); empty otherwise.
var Commit string

const modulePath = "github.com/sparcml/sparcml"

// String is the build's version: Version when the build set it, else the
// version of this module in the running program as the Go toolchain
// recorded it: a release tag when sparcml is a dependency, "(devel)" with
// the commit when built in its own tree.
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version)"
	}
	version := ""
	if info.Main.Path == modulePath {
		version = info.Main.Version
		var rev, dirty string
		for _, kv := range info.Settings {
			switch kv.Key {
			case "vcs.revision":
				rev = kv.Value
			case "vcs.modified":
				if kv.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		// Go stamps a pseudo-version holding the revision when it can;
		// otherwise say the revision.
		if rev != "" && (version == "" || version == "(devel)") {
			version = "(devel) " + rev[:min(len(rev), 12)] + dirty
		}
	} else {
		for _, m := range info.Deps {
			if m.Path == modulePath {
				version = m.Version
				if m.Replace != nil {
					version += " => " + m.Replace.Path + " " + m.Replace.Version
				}
			}
		}
	}
	if version = strings.TrimSpace(version); version == "" {
		version = "(devel)"
	}
	return version
}
