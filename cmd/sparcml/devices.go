package main

import (
	"os"

	"github.com/sparcml/sparcml/rdma/rdmainfo"
)

func devicesCmd(args []string) error {
	if len(args) > 0 {
		return usagef("devices takes no arguments")
	}
	ds, err := rdmainfo.Devices()
	if err != nil {
		return err
	}
	return rdmainfo.Report(os.Stdout, ds)
}
