//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/sparcml/sparcml/internal/bootstrap"
	"github.com/sparcml/sparcml/internal/shm"
	"github.com/sparcml/sparcml/transport"
)

// Two ranks of one host, here goroutines of one process sharing an
// in-memory store (in a job: the bootstrap store), exchange a message
// over shared memory.
func ExampleNew() {
	store := bootstrap.NewMemStore()
	defer store.Close()
	ctx := context.Background()
	ts := make([]*shm.Transport, 2)
	var wg sync.WaitGroup
	for r := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			ts[r], err = shm.New(ctx, shm.Config{Rank: r, Size: 2, Store: store, Token: []byte("job secret")})
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	defer ts[0].Close()
	defer ts[1].Close()

	tag, desc := transport.Tag{Comm: 1, Seq: 1}, transport.Desc{Kind: transport.OpP2P}
	recv := ts[1].Recv(0, tag, desc, nil)
	ts[0].Send(1, tag, desc, []byte("hello from rank 0"))
	if err := recv.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("rank 1 got %q over %s\n", recv.Data(), ts[1].Name())
	// Output: rank 1 got "hello from rank 0" over shm
}
