package sparcml

import (
	"runtime/debug"
	"strings"

	"github.com/sparcml/sparcml/internal/config"
	"github.com/sparcml/sparcml/internal/logging"
)

// newLogger is the logger of a communicator: SPARCML_DEBUG's level and
// SPARCML_DEBUG_SUBSYS's subsystems, written to stderr or to WithLogger's
// function; nil (silent) when WithLogger was given nil.
func newLogger(o options, s *config.Settings) *logging.Logger {
	if o.sinkSet && o.sink == nil {
		return nil
	}
	return logging.New(o.sink, s.Debug, s.DebugSubsys)
}

const modulePath = "github.com/sparcml/sparcml"

// buildVersion is the version of this module in the running program, as
// the Go toolchain recorded it: a release tag when sparcml is a
// dependency, "(devel)" with the commit when built in its own tree.
func buildVersion() string {
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
