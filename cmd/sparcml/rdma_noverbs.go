//go:build !linux || !cgo || sparcml_noverbs

package main

// rdmaSupport says whether the RDMA transport is compiled in: the same
// build constraint as package verbs' stub.
const rdmaSupport = "not compiled in (built without cgo, off Linux, or with the sparcml_noverbs tag): TCP only"
