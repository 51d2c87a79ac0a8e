package data

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

// Options say which part of a file this rank loads and how.
type Options struct {
	Rank, Size int // this rank's shard of Size shards

	// Dim is the declared number of features: an index beyond it is an
	// error. 0: the largest index in the shard (the ranks then agree on
	// the largest of all).
	Dim int
	// Limit > 0 keeps about Limit samples of the whole set (train and
	// test together), for runs on a subset: the first Limit of an IDX
	// file, of a gzip stream or of the generator, ceil(Limit/Size) of
	// each rank's byte range of a plain LIBSVM file.
	Limit int
	// TestFraction > 0 holds out that fraction of the samples as a test
	// set, chosen by a hash of each sample's position in the file and
	// Seed, so the split does not depend on the number of ranks.
	TestFraction float64
	Seed         uint64
}

func (o Options) check() error {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return fmt.Errorf("data: shard %d of %d", o.Rank, o.Size)
	}
	if o.TestFraction < 0 || o.TestFraction >= 1 {
		return fmt.Errorf("data: test fraction %g (want [0, 1))", o.TestFraction)
	}
	return nil
}

// gzipMagic opens every gzip stream, bzip2Magic every bzip2 stream.
var (
	gzipMagic  = []byte{0x1f, 0x8b}
	bzip2Magic = []byte("BZh")
)

// LoadLIBSVM reads this rank's shard of a LIBSVM file, plain, gzip or
// bzip2 (recognized by its first bytes, whatever its name). A plain file
// is cut into Size byte ranges and a rank reads only its own: it seeks
// to the start of its range and begins at the next line, and reads the
// line that crosses its end; so every line is read by exactly one rank.
// A compressed stream cannot seek: every rank decompresses it from the
// start and keeps every Size-th sample, parsing only those. Labels are
// kept as written; the caller maps them to classes (Labeling.Apply) once
// the ranks agree on the convention.
func LoadLIBSVM(path string, o Options) (train, test *Set, err error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, &FileError{File: path, Err: err}
	}
	defer f.Close()
	head := make([]byte, 3)
	n, _ := io.ReadFull(f, head)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, &FileError{File: path, Err: err}
	}
	switch {
	case n >= 2 && bytes.Equal(head[:2], gzipMagic):
		zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return nil, nil, &FileError{File: path, Err: fmt.Errorf("%w: gzip: %v", ErrFormat, err)}
		}
		return ReadLIBSVMStream(path, zr, o)
	case n == 3 && bytes.Equal(head, bzip2Magic):
		// The LIBSVM site publishes its sets as .bz2.
		return ReadLIBSVMStream(path, bzip2.NewReader(bufio.NewReaderSize(f, 1<<20)), o)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, &FileError{File: path, Err: err}
	}
	loc := func(off int64) int64 { return lineOfOffset(path, off) }
	return ReadLIBSVM(path, f, st.Size(), loc, o)
}

// lineOfOffset counts the lines of a plain file before offset off, for
// messages: the 1-based line that starts at off.
func lineOfOffset(path string, off int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return countLines(f, off)
}

func countLines(r io.Reader, off int64) int64 {
	buf := make([]byte, 1<<20)
	line := int64(1)
	for off > 0 {
		n, err := r.Read(buf[:min(int64(len(buf)), off)])
		line += int64(bytes.Count(buf[:n], []byte{'\n'}))
		off -= int64(n)
		if err != nil {
			break
		}
	}
	return line
}

// ReadLIBSVM reads this rank's byte range of a seekable LIBSVM source of
// size bytes named name. lineAt(off), when not nil, gives the line
// number at a byte offset for messages.
func ReadLIBSVM(name string, r io.ReadSeeker, size int64, lineAt func(int64) int64, o Options) (train, test *Set, err error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	start, end := size*int64(o.Rank)/int64(o.Size), size*int64(o.Rank+1)/int64(o.Size)
	if lineAt == nil {
		lineAt = func(int64) int64 { return 0 }
	}
	ld := newLoader(name, o)
	ld.locate = func(off int64) string { return fmt.Sprintf("%s:%d", name, lineAt(off)) }
	if start > 0 {
		if _, err := r.Seek(start-1, io.SeekStart); err != nil {
			return nil, nil, &FileError{File: name, Err: err}
		}
	}
	lr := &lineReader{br: bufio.NewReaderSize(r, 1<<20), off: max(start-1, 0)}
	if start > 0 {
		// Begin at the first line that starts at or after start: the
		// line that starts before it belongs to the rank before.
		if _, err := lr.next(); err != nil && err != io.EOF {
			return nil, nil, &FileError{File: name, Err: err}
		}
	}
	for lr.off < end && !ld.full() {
		at := lr.off
		line, err := lr.next()
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil && err != io.EOF {
			return nil, nil, &FileError{File: name, Err: err}
		}
		if perr := ld.add(line, at); perr != nil {
			return nil, nil, &FileError{File: name, Line: lineAt(at), Err: perr}
		}
		if err == io.EOF {
			break
		}
	}
	return ld.finish()
}

// ReadLIBSVMStream reads this rank's samples of a LIBSVM stream that
// cannot seek (a gzip or bzip2 file): it reads everything and keeps
// sample i when i mod Size == Rank. A stream that ends early or fails
// its checksum is an error naming the line it reached.
func ReadLIBSVMStream(name string, r io.Reader, o Options) (train, test *Set, err error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	ld := newLoader(name, o)
	ld.locate = func(line int64) string { return fmt.Sprintf("%s:%d", name, line) }
	lr := &lineReader{br: bufio.NewReaderSize(r, 1<<20)}
	sample := 0
	for lineNo := int64(1); ld.o.Limit <= 0 || sample < ld.o.Limit; lineNo++ {
		at := lr.off
		line, err := lr.next()
		if err != nil && err != io.EOF {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, nil, &FileError{File: name, Line: lineNo, Err: fmt.Errorf("%w: file truncated (the gzip stream ends early)", ErrFormat)}
			}
			return nil, nil, &FileError{File: name, Line: lineNo, Err: fmt.Errorf("%w: %v", ErrFormat, err)}
		}
		if err == io.EOF && len(line) == 0 {
			break
		}
		if isSample(line) {
			if sample%o.Size == o.Rank {
				if perr := ld.addAt(line, at, lineNo); perr != nil {
					return nil, nil, &FileError{File: name, Line: lineNo, Err: perr}
				}
			}
			sample++
		}
		if err == io.EOF {
			break
		}
	}
	return ld.finish()
}

// lineReader returns lines (without the newline) and tracks the offset
// of the next byte. A line longer than the buffer is assembled in buf.
type lineReader struct {
	br  *bufio.Reader
	off int64
	buf []byte
}

func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		l.buf = append(l.buf[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = l.br.ReadSlice('\n')
			l.buf = append(l.buf, line...)
		}
		line = l.buf
	}
	l.off += int64(len(line))
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	return line, err
}

// loader accumulates parsed samples into a train and a test set.
type loader struct {
	o           Options
	train, test *Set
	locate      func(int64) string
	n           int
}

func newLoader(name string, o Options) *loader {
	mk := func(suffix string) *Set {
		return &Set{Name: name + suffix, Dim: o.Dim, RowPtr: []int{0}}
	}
	ld := &loader{o: o, train: mk("")}
	if o.TestFraction > 0 {
		ld.test = mk(" (held-out part)")
	}
	return ld
}

// full reports whether a rank of a plain file has read its share of
// Limit.
func (ld *loader) full() bool {
	return ld.o.Limit > 0 && ld.n >= (ld.o.Limit+ld.o.Size-1)/ld.o.Size
}

// add parses a line at byte offset off (its position for messages).
func (ld *loader) add(line []byte, off int64) error { return ld.addAt(line, off, off) }

// addAt parses a line at byte offset off, recorded at position pos.
func (ld *loader) addAt(line []byte, off, pos int64) error {
	if !isSample(line) {
		return nil
	}
	s := ld.train
	if ld.test != nil && unitHash(ld.o.Seed, uint64(off)) < ld.o.TestFraction {
		s = ld.test
	}
	label, maxIndex, idx, val, err := parseLIBSVM(line, ld.o.Dim, s.Idx, s.Val)
	if err != nil {
		return err
	}
	s.Idx, s.Val = idx, val
	s.RowPtr = append(s.RowPtr, len(s.Idx))
	s.Labels = append(s.Labels, label)
	s.Pos = append(s.Pos, pos)
	s.Dim = max(s.Dim, maxIndex)
	ld.n++
	return nil
}

func (ld *loader) finish() (train, test *Set, err error) {
	for _, s := range []*Set{ld.train, ld.test} {
		if s != nil {
			s.Locate = ld.locate
		}
	}
	return ld.train, ld.test, nil
}

// unitHash maps (seed, x) to [0, 1) (splitmix64).
func unitHash(seed, x uint64) float64 {
	z := seed*0x9E3779B97F4A7C15 + x + 0x632BE59BD9B4E019
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
