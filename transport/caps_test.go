package transport_test

import (
	"testing"

	"github.com/sparcml/sparcml/transport"
)

var segSink int

// BenchmarkCaps reads a transport's segment size through the interface,
// as the collectives do per allreduce: with the capabilities made once it
// allocates nothing.
func BenchmarkCaps(b *testing.B) {
	near, far := transport.NewInMemory(2), transport.NewInMemory(2)
	rt, err := transport.NewRoute([]transport.Transport{near[0], far[0]}, []int{0, 1})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	for _, tr := range []transport.Transport{near[0], rt} {
		b.Run(tr.Name(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				segSink += tr.Caps().SegmentBytes
			}
		})
	}
}
