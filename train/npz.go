package train

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/sparcml/sparcml/train/model"
)

// The NumPy .npz format is a zip archive of .npy files, one per array.
// An .npy file (format version 1.0) is the magic "\x93NUMPY", the
// version bytes 1 and 0, a little-endian uint16 header length, and a
// header that is a Python dict literal ({'descr': '<f4', 'fortran_order':
// False, 'shape': (784, 1024), }) padded with spaces and a newline so
// the data starts at a multiple of 64 bytes; the data follow in C order.

// npyMagic opens every .npy file.
const npyMagic = "\x93NUMPY"

// SaveNPZ writes the model's tensors (w0, b0, w1, ...) as float32 arrays
// to path, in the layout numpy.load reads.
func SaveNPZ(path string, m model.Model) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	zw := zip.NewWriter(bw)
	p := m.Params()
	for _, t := range m.Tensors() {
		if err := writeNPY(zw, t.Name, t.Shape, p[t.Offset:t.Offset+t.Size()]); err != nil {
			f.Close()
			return fmt.Errorf("save %s: %w", path, err)
		}
	}
	if err := errors.Join(zw.Close(), bw.Flush()); err != nil {
		f.Close()
		return fmt.Errorf("save %s: %w", path, err)
	}
	return f.Close()
}

func writeNPY(zw *zip.Writer, name string, shape []int, data []float32) error {
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store})
	if err != nil {
		return err
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", tuple)
	pad := 64 - (len(npyMagic)+4+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var pre [10]byte
	copy(pre[:], npyMagic)
	pre[6], pre[7] = 1, 0
	binary.LittleEndian.PutUint16(pre[8:], uint16(len(header)))
	if _, err := w.Write(pre[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	for i, v := range data {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) == cap(buf) || i == len(data)-1 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	return nil
}

// Array is one float32 array of an .npz file.
type Array struct {
	Shape []int
	Data  []float32
}

// ReadNPZ reads every float32 array of an .npz file, by name (without
// the .npy suffix). Other element types, Fortran order and malformed
// headers are errors naming the array.
func ReadNPZ(path string) (map[string]Array, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer zr.Close()
	out := map[string]Array{}
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, ".npy")
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, f.Name, err)
		}
		a, err := readNPY(rc, f.UncompressedSize64)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, f.Name, err)
		}
		out[name] = a
	}
	return out, nil
}

var (
	npyDescr   = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyFortran = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShape   = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// readNPY decodes one .npy stream of size bytes holding float32 values.
func readNPY(r io.Reader, size uint64) (Array, error) {
	var pre [10]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || string(pre[:6]) != npyMagic {
		return Array{}, errors.New("not an .npy array")
	}
	var hlen int
	switch pre[6] {
	case 1:
		hlen = int(binary.LittleEndian.Uint16(pre[8:]))
	case 2, 3:
		var more [2]byte
		if _, err := io.ReadFull(r, more[:]); err != nil {
			return Array{}, errors.New("truncated .npy header")
		}
		hlen = int(binary.LittleEndian.Uint32(append(pre[8:10:10], more[:]...)))
	default:
		return Array{}, fmt.Errorf(".npy format version %d", pre[6])
	}
	if hlen > 1<<16 {
		return Array{}, fmt.Errorf(".npy header of %d bytes", hlen)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return Array{}, errors.New("truncated .npy header")
	}
	h := string(hb)
	d, fo, sh := npyDescr.FindStringSubmatch(h), npyFortran.FindStringSubmatch(h), npyShape.FindStringSubmatch(h)
	if d == nil || fo == nil || sh == nil {
		return Array{}, fmt.Errorf("bad .npy header %q", strings.TrimSpace(h))
	}
	if d[1] != "<f4" {
		return Array{}, fmt.Errorf("element type %s (want float32, <f4)", d[1])
	}
	if fo[1] != "False" {
		return Array{}, errors.New("Fortran order is not supported")
	}
	var shape []int
	n := uint64(1)
	for _, s := range strings.Split(sh[1], ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return Array{}, fmt.Errorf("bad .npy shape (%s)", sh[1])
		}
		shape = append(shape, v)
		n *= uint64(v)
		if 4*n > size {
			return Array{}, fmt.Errorf("shape (%s) is larger than the file", sh[1])
		}
	}
	// Read in chunks, so a size announced by a corrupt archive costs no
	// more memory than the data that arrives.
	a := Array{Shape: shape}
	chunk := make([]byte, 1<<16)
	for left := 4 * n; left > 0; {
		c := chunk[:min(left, uint64(len(chunk)))]
		if _, err := io.ReadFull(r, c); err != nil {
			return Array{}, fmt.Errorf("truncated .npy data (shape (%s))", sh[1])
		}
		for i := 0; i < len(c); i += 4 {
			a.Data = append(a.Data, math.Float32frombits(binary.LittleEndian.Uint32(c[i:])))
		}
		left -= uint64(len(c))
	}
	return a, nil
}

// LoadNPZ sets the model's parameters from an .npz file written by
// SaveNPZ (or by numpy.savez with float32 arrays of the same names and
// shapes), or says which array does not fit.
func LoadNPZ(path string, m model.Model) error {
	arrays, err := ReadNPZ(path)
	if err != nil {
		return err
	}
	p := m.Params()
	for _, t := range m.Tensors() {
		a, ok := arrays[t.Name]
		if !ok {
			return fmt.Errorf("model does not fit: %s has no array %s (the %s needs %s of shape %v)", path, t.Name, m.Describe(), t.Name, t.Shape)
		}
		if fmt.Sprint(a.Shape) != fmt.Sprint(t.Shape) {
			return fmt.Errorf("model does not fit the data: %s's %s has shape %v, the %s needs %v", path, t.Name, a.Shape, m.Describe(), t.Shape)
		}
		copy(p[t.Offset:t.Offset+t.Size()], a.Data)
	}
	return nil
}

// InputNote says what input a saved model of data expects.
func InputNote(data string) string {
	if data == "fashion-mnist" {
		return "inputs: the 784 pixels of a 28x28 image, row by row, scaled to [0, 1] (x/255)"
	}
	return "inputs: the LIBSVM features as written, index i in row i-1 of w0"
}
