package sparcml

import (
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
