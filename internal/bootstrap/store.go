// Package bootstrap turns a launcher's environment into a job description
// (rank, size, rendezvous address, token, interface) and runs the small
// key-value store, served by rank 0, through which ranks exchange their
// listen addresses and transport connection data. Every connection is
// authenticated with the job token.
package bootstrap

import "context"

// Store is the job's key-value store. Keys are written once.
type Store interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns key's value, waiting until some rank has set it or ctx
	// ends.
	Get(ctx context.Context, key string) ([]byte, error)
	// Close releases the client (and, on rank 0, stops the server once the
	// other ranks are done with it).
	Close() error
}
