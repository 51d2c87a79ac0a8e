package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/sparcml/sparcml/internal/version"
)

// versionCmd prints what a bug report needs: the module version, the
// commit it was built from, the Go toolchain and whether the RDMA
// transport is compiled in.
func versionCmd(w io.Writer, args []string) error {
	if len(args) > 0 {
		return usagef("version takes no arguments")
	}
	module, modVersion, commit := "github.com/sparcml/sparcml", "(unknown)", "(unknown: built without VCS information)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		module, modVersion = bi.Main.Path, bi.Main.Version
		commit = commitOf(bi.Settings)
	}
	if version.Commit != "" { // given by the Makefile, for builds without VCS stamping (-buildvcs=false)
		commit = version.Commit
	}
	fmt.Fprintf(w, "sparcml %s\n", version.String())
	fmt.Fprintf(w, "module:  %s %s\n", module, modVersion)
	fmt.Fprintf(w, "commit:  %s\n", commit)
	fmt.Fprintf(w, "go:      %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "rdma:    %s\n", rdmaSupport)
	return nil
}

// commitOf describes the VCS revision the Go toolchain stamped into the
// binary: hash, commit time, and whether the tree had local changes.
func commitOf(settings []debug.BuildSetting) string {
	var rev, when, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "(unknown: built without VCS information)"
	}
	out := rev
	if when != "" {
		out += " (" + when + ")"
	}
	if modified == "true" {
		out += " with uncommitted changes"
	}
	return out
}
