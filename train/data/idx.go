package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// The IDX format of MNIST and Fashion-MNIST: a big-endian header (two
// zero bytes, a type byte, 0x08 for unsigned bytes, the number of
// dimensions) and the dimensions as big-endian uint32s, then the values,
// last dimension fastest. Images are [N, rows, cols], labels [N].

// idxHeader is a parsed IDX header.
type idxHeader struct {
	dims   []int
	header int64 // bytes before the data
}

// records is the first dimension; recordSize the product of the others.
func (h idxHeader) records() int { return h.dims[0] }
func (h idxHeader) recordSize() int {
	n := 1
	for _, d := range h.dims[1:] {
		n *= d
	}
	return n
}

func readIDXHeader(r io.Reader) (idxHeader, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return idxHeader{}, fmt.Errorf("%w: no IDX header (%v)", ErrFormat, err)
	}
	if magic[0] != 0 || magic[1] != 0 {
		return idxHeader{}, fmt.Errorf("%w: not an IDX file (magic %x)", ErrFormat, magic)
	}
	if magic[2] != 0x08 {
		return idxHeader{}, fmt.Errorf("%w: IDX value type 0x%02x is not supported (want 0x08, unsigned bytes)", ErrFormat, magic[2])
	}
	nd := int(magic[3])
	if nd < 1 || nd > 4 {
		return idxHeader{}, fmt.Errorf("%w: IDX file with %d dimensions", ErrFormat, nd)
	}
	h := idxHeader{dims: make([]int, nd), header: 4 + 4*int64(nd)}
	total := int64(1)
	for i := range h.dims {
		var d uint32
		if err := binary.Read(r, binary.BigEndian, &d); err != nil {
			return idxHeader{}, fmt.Errorf("%w: IDX header truncated (%v)", ErrFormat, err)
		}
		h.dims[i] = int(d)
		total *= max(int64(d), 1)
		if total > 1<<40 {
			return idxHeader{}, fmt.Errorf("%w: IDX dimensions %v too large", ErrFormat, h.dims[:i+1])
		}
	}
	return h, nil
}

// idxFile is an open IDX file positioned after its header.
type idxFile struct {
	name string
	r    io.Reader
	file *os.File // for seeking; nil for gzip
	size int64    // -1 for gzip
	h    idxHeader
	pos  int64 // data bytes consumed
	c    io.Closer
}

func openIDX(path string) (*idxFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	fail := func(err error) (*idxFile, error) {
		f.Close()
		return nil, &FileError{File: path, Err: err}
	}
	head := make([]byte, 2)
	n, _ := io.ReadFull(f, head)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	x := &idxFile{name: path, c: f, size: -1}
	if n == 2 && bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return fail(fmt.Errorf("%w: gzip: %v", ErrFormat, err))
		}
		x.r = bufio.NewReaderSize(zr, 1<<20)
	} else {
		st, err := f.Stat()
		if err != nil {
			return fail(err)
		}
		x.r, x.file, x.size = f, f, st.Size()
	}
	if x.h, err = readIDXHeader(x.r); err != nil {
		return fail(err)
	}
	if x.size >= 0 {
		want := x.h.header + int64(x.h.records())*int64(x.h.recordSize())
		if x.size < want {
			return fail(fmt.Errorf("%w: file truncated: %d bytes, the header announces %d", ErrFormat, x.size, want))
		}
	}
	return x, nil
}

// readRecords reads n records from record lo on, skipping to lo by
// seeking or, for a stream, by discarding. The buffer grows with what
// arrives, so a header announcing more than the file holds costs no more
// memory than the file.
func (x *idxFile) readRecords(lo, n int) ([]byte, error) {
	rs := int64(x.h.recordSize())
	if x.file != nil {
		if _, err := x.file.Seek(x.h.header+int64(lo)*rs, io.SeekStart); err != nil {
			return nil, &FileError{File: x.name, Err: err}
		}
		x.r = bufio.NewReaderSize(x.file, 1<<20)
	} else if _, err := io.CopyN(io.Discard, x.r, int64(lo)*rs-x.pos); err != nil {
		return nil, x.truncated(lo, err)
	}
	x.pos = int64(lo) * rs
	want := int64(n) * rs
	var out []byte
	for int64(len(out)) < want {
		chunk := min(want-int64(len(out)), 1<<22)
		out = slices.Grow(out, int(chunk))
		m, err := io.ReadFull(x.r, out[len(out):len(out)+int(chunk)])
		out = out[:len(out)+m]
		x.pos += int64(m)
		if err != nil {
			return nil, x.truncated(lo+int(int64(len(out))/max(rs, 1)), err)
		}
	}
	return out, nil
}

func (x *idxFile) truncated(record int, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: file truncated: it ends in record %d of the %d its header announces", ErrFormat, record+1, x.h.records())
	} else {
		err = fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return &FileError{File: x.name, Line: int64(record + 1), Unit: "record", Err: err}
}

func (x *idxFile) Close() error { return x.c.Close() }

// LoadIDX reads this rank's shard of an IDX image file and its label file
// (plain or gzip, recognized by their first bytes): images [N, rows,
// cols] of unsigned bytes, scaled to [0, 1] (x/255), and labels [N]
// below classes. The shard is a contiguous range of the first Limit
// images (all when Limit is 0), the rank's 1/Size of them; a gzip file is
// decompressed and skipped up to the range, so memory holds only the
// shard. Options.Dim and TestFraction are not used.
func LoadIDX(images, labels string, classes int, o Options) (*Set, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	xi, err := openIDX(images)
	if err != nil {
		return nil, err
	}
	defer xi.Close()
	xl, err := openIDX(labels)
	if err != nil {
		return nil, err
	}
	defer xl.Close()
	if len(xi.h.dims) < 2 {
		return nil, &FileError{File: images, Err: fmt.Errorf("%w: IDX dimensions %v are not images [N, rows, cols]", ErrFormat, xi.h.dims)}
	}
	if len(xl.h.dims) != 1 {
		return nil, &FileError{File: labels, Err: fmt.Errorf("%w: IDX dimensions %v are not labels [N]", ErrFormat, xl.h.dims)}
	}
	if xi.h.records() != xl.h.records() {
		return nil, &FileError{File: labels, Err: fmt.Errorf("%w: %d labels for the %d images of %s", ErrFormat, xl.h.records(), xi.h.records(), images)}
	}
	n := xi.h.records()
	if o.Limit > 0 {
		n = min(n, o.Limit)
	}
	lo, hi := n*o.Rank/o.Size, n*(o.Rank+1)/o.Size
	dim := xi.h.recordSize()
	pix, err := xi.readRecords(lo, hi-lo)
	if err != nil {
		return nil, err
	}
	lab, err := xl.readRecords(lo, hi-lo)
	if err != nil {
		return nil, err
	}
	s := &Set{Name: images, Dim: dim, Classes: classes, X: make([]float32, len(pix)),
		Labels: make([]int32, hi-lo), Pos: make([]int64, hi-lo)}
	for i, p := range pix {
		s.X[i] = float32(p) / 255
	}
	for i, l := range lab {
		if int(l) >= classes {
			return nil, &FileError{File: labels, Line: int64(lo + i + 1), Unit: "record",
				Err: fmt.Errorf("%w: label %d out of range (%d classes)", ErrFormat, l, classes)}
		}
		s.Labels[i] = int32(l)
		s.Pos[i] = int64(lo + i + 1)
	}
	s.Locate = func(rec int64) string { return fmt.Sprintf("%s record %d", images, rec) }
	return s, nil
}
