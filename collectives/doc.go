// Package collectives holds the collective algorithms, one file each, and
// the alpha-beta cost model that chooses among them. Algorithms never touch
// the network directly: they take an Op, which carries the transport as a
// parameter, so every algorithm runs unchanged over the in-memory transport
// (tests, race detector), TCP and RDMA.
//
// Every algorithm must
//   - tag each message with a step unique per (sender, receiver) within the op,
//   - post receives before waiting where it can (so payloads land zero-copy),
//   - never send to itself,
//   - reuse scratch buffers from Op.Pool instead of allocating per call.
package collectives
