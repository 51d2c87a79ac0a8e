package transport_test

import (
	"context"
	"fmt"

	"github.com/sparcml/sparcml/transport"
)

// Rank 0 of a job of three reaches rank 1 through one transport (shared
// memory on its host, say) and rank 2 through another (TCP); here both
// are in-memory meshes.
func ExampleNewRoute() {
	near, far := transport.NewInMemory(3), transport.NewInMemory(3)
	routes := make([]*transport.Route, 3)
	for r := range routes {
		via := []int{1, 1, 1} // every peer over the far transport...
		if r < 2 {
			via[1-r] = 0 // ...but ranks 0 and 1 share the near one
		}
		routes[r], _ = transport.NewRoute([]transport.Transport{near[r], far[r]}, via)
		defer routes[r].Close()
	}
	ctx, desc := context.Background(), transport.Desc{Kind: transport.OpP2P}
	for _, peer := range []int{1, 2} {
		tag := transport.Tag{Comm: 1, Seq: uint64(peer)}
		recv := routes[peer].Recv(0, tag, desc, nil)
		routes[0].Send(peer, tag, desc, []byte("hi"))
		recv.Wait(ctx)
		part := 0
		for i, p := range routes[0].Parts() {
			if p == routes[0].Via(peer) {
				part = i
			}
		}
		fmt.Printf("rank %d got %q; rank 0 reaches it through part %d\n", peer, recv.Data(), part)
	}
	fmt.Println(routes[0].Parts()[0].Stats().MsgsSent, routes[0].Parts()[1].Stats().MsgsSent, routes[0].Stats().MsgsSent)
	// Output:
	// rank 1 got "hi"; rank 0 reaches it through part 0
	// rank 2 got "hi"; rank 0 reaches it through part 1
	// 1 1 2
}
