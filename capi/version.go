package main

// #include "capi.h"
import "C"

import (
	"sync"

	"github.com/sparcml/sparcml/internal/version"
)

// buildVersion is the build's version as a C string, made once and never
// freed: sparcml_build_version hands out static storage.
var buildVersion = sync.OnceValue(func() *C.char { return C.CString(version.String()) })

//export sparcmlGoBuildVersion
func sparcmlGoBuildVersion() *C.char { return buildVersion() }
