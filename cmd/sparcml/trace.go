package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sparcml/sparcml/internal/flight"
)

// traceCmd merges flight-recorder dumps (SPARCML_DUMP_DIR) into one view
// of where each rank stood. An argument that is a directory stands for
// the dumps in it.
func traceCmd(w io.Writer, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return usagef("usage: sparcml trace DUMP... (files sparcml-flight-*.json, or directories holding them)")
	}
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		found, err := filepath.Glob(filepath.Join(a, "sparcml-flight-*.json"))
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return fmt.Errorf("no flight dumps (sparcml-flight-*.json) in %s", a)
		}
		files = append(files, found...)
	}
	var dumps []*flight.Dump
	for _, f := range files {
		d, err := readDump(f)
		if err != nil {
			return err
		}
		dumps = append(dumps, d)
	}
	return flight.WriteView(w, dumps)
}

func readDump(path string) (*flight.Dump, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := flight.ReadDump(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}
