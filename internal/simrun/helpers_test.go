package simrun

import "github.com/sparcml/sparcml/transport"

func tagOf(step uint32) transport.Tag { return transport.Tag{Comm: 1, Seq: 1, Step: step} }
func descOf() transport.Desc          { return transport.Desc{Kind: transport.OpP2P} }
