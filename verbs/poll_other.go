//go:build !linux

package verbs

import "time"

type pollFile struct{}

func (cq *CQ) waitEvent(time.Time) (bool, error) { return false, errNotBuilt }
func (ch *CompChannel) interrupt()               {}
