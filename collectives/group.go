package collectives

import "github.com/sparcml/sparcml/transport"

// group is a view of some ranks of a transport as a transport of their
// own, so that the flat algorithms run unchanged on one level of a
// hierarchy: rank i of the group is rank members[i] of the parent, and
// every tag's step is moved up by base, so that two phases of one
// operation that use the same pairs of ranks never share a tag. Failing an
// operation, the sticky error and the statistics are the parent's; the
// group owns no connection and is never closed.
//
// When fixed is set, every message carries it instead of the descriptor
// the algorithm gives: a hierarchical algorithm that runs other
// collectives inside one operation keeps the operation's descriptor on
// the wire, as the transport's check of one kind per sequence number
// requires, and the ranks still detect a caller's mismatch by it.
type group struct {
	transport.Transport
	members []int
	rank    int
	base    uint32
	fixed   *transport.Desc
}

// newGroup returns the view of members (parent ranks, the caller's among
// them) with steps moved up by base.
func newGroup(parent transport.Transport, members []int, base uint32) *group {
	g := &group{Transport: parent, members: members, rank: -1, base: base}
	for i, m := range members {
		if m == parent.Rank() {
			g.rank = i
		}
	}
	return g
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.members) }

func (g *group) Send(peer int, tag transport.Tag, desc transport.Desc, bufs ...[]byte) *transport.Request {
	tag.Step += g.base
	if g.fixed != nil {
		desc = *g.fixed
	}
	return g.Transport.Send(g.members[peer], tag, desc, bufs...)
}

func (g *group) Recv(peer int, tag transport.Tag, desc transport.Desc, buf []byte) *transport.Request {
	tag.Step += g.base
	if g.fixed != nil {
		desc = *g.fixed
	}
	return g.Transport.Recv(g.members[peer], tag, desc, buf)
}

// Caps is the parent's scheduling only (transport.ViewCaps): a view of
// some ranks cannot fail the parent on their behalf, and its algorithms
// keep the collectives' segment size.
func (g *group) Caps() transport.Capabilities { return transport.ViewCaps(g.Transport) }

// Close does nothing: the parent's owner closes it.
func (g *group) Close() error { return nil }

// subOp is op on the group of members with steps from base.
func subOp(op *Op, members []int, base uint32) *Op {
	sub := *op
	sub.T = newGroup(op.T, members, base)
	sub.Topo = nil
	return &sub
}

// subOpFixed is subOp whose messages all carry op's descriptor, whatever
// collective runs on it (see group.fixed).
func subOpFixed(op *Op, members []int, base uint32) *Op {
	sub := subOp(op, members, base)
	desc := op.Desc
	sub.T.(*group).fixed = &desc
	return sub
}
