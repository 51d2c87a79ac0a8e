// Package apihook lets the CLI and the C ABI reach what they need of the
// public API's types that is not API: package sparcml registers those
// functions at init, under their types, and the callers get them by type.
// A user of the module cannot import it, so the root package's exports
// stay the API.
package apihook

import (
	"fmt"
	"reflect"
	"sync"
)

var fns sync.Map // reflect.Type of the function -> the function

// Set registers f under its type F, replacing any function of that type.
func Set[F any](f F) { fns.Store(reflect.TypeFor[F](), f) }

// Get returns the function registered under type F. It panics when there
// is none: a wiring error of the module, not a condition to handle.
func Get[F any]() F {
	f, ok := fns.Load(reflect.TypeFor[F]())
	if !ok {
		panic(fmt.Sprintf("apihook: no %v registered", reflect.TypeFor[F]()))
	}
	return f.(F)
}
