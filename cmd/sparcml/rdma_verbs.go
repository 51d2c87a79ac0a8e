//go:build linux && cgo && !sparcml_noverbs

package main

// rdmaSupport says whether the RDMA transport is compiled in: the same
// build constraint as package verbs' libibverbs binding.
const rdmaSupport = "compiled in (libibverbs)"
