package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparcml/sparcml/train"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the CLI sparcmlBinary built, which outlives any one
// test.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// sparcmlBinary builds the CLI once for the multi-process tests (or uses
// SPARCML_BIN).
func sparcmlBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test")
	}
	if bin := os.Getenv("SPARCML_BIN"); bin != "" {
		return bin
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sparcml-train-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "sparcml")
		args := []string{"build", "-o", binPath}
		if tags := os.Getenv("TAGS"); tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runTrain runs `sparcml train ARGS` with a deadline: a hang fails the
// test instead of stalling it.
func runTrain(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, sparcmlBinary(t), append([]string{"train"}, args...)...)
	cmd.Env = append(os.Environ(), "SPARCML_DEBUG=NONE", "SPARCML_TIMEOUT=60s")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sparcml train %v did not finish within %v (hang)\nstdout:\n%s\nstderr:\n%s", args, timeout, o.String(), e.String())
	}
	return o.String(), e.String(), err
}

func fashionMNIST(t *testing.T) {
	if _, err := os.Stat(filepath.Join(train.FashionMNISTDir, "t10k-labels-idx1-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST is not installed (make deps installs Debian's dataset-fashion-mnist): %v", err)
	}
}

func records(t *testing.T, out string) []train.Record {
	var recs []train.Record
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r train.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// evalNumPy evaluates a saved mlp on the first n Fashion-MNIST test
// images with numpy, independently of the Go code, and prints the
// number classified right.
const evalNumPy = `
import gzip, sys, numpy as np
path, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m = np.load(path)
with gzip.open(d + "/t10k-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n].astype(np.float32) / 255
with gzip.open(d + "/t10k-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
layers = len([k for k in m.files if k.startswith("w")])
for l in range(layers):
    x = x @ m["w%d" % l] + m["b%d" % l]
    if l < layers - 1:
        x = np.maximum(x, 0)
print(int((x.argmax(axis=1) == y).sum()))
`

// A short training: 3 ranks, 2 epochs on a subset of Fashion-MNIST,
// well above chance; the saved model evaluated again (by sparcml with
// one rank, and by numpy) gives the same test accuracy.
func TestTrainShortRunAndReload(t *testing.T) {
	fashionMNIST(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "m.npz")
	const samples = 6000 // and 1000 test images
	out, errOut, err := runTrain(t, 5*time.Minute, "-n", "3", "--hidden", "128,64", "--samples", strconv.Itoa(samples),
		"--epochs", "2", "--format", "json", "--save", model)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	recs := records(t, out)
	final := recs[len(recs)-1]
	if final.Epoch != 2 || final.NP != 3 || final.Reduce != "dense" || final.BytesSent <= 0 || final.ComputeS <= 0 || final.CommS <= 0 ||
		final.Seed != 1 || final.Batch != 64 || final.Momentum != 0.9 || final.Select != "" { // the defaults, resolved
		t.Fatalf("final record %+v", final)
	}
	if final.TestAccuracy < 0.6 || final.TestAccuracy <= recs[0].TestAccuracy+0.3 {
		t.Fatalf("accuracy %.3f after 2 epochs, %.3f before training (chance is 0.1)", final.TestAccuracy, recs[0].TestAccuracy)
	}

	out, errOut, err = runTrain(t, 2*time.Minute, "-n", "1", "--hidden", "128,64", "--samples", strconv.Itoa(samples),
		"--epochs", "0", "--load", model, "--format", "json")
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if again := records(t, out); len(again) != 1 || again[0].TestAccuracy != final.TestAccuracy || math.Abs(again[0].TestLoss-final.TestLoss) > 1e-6*final.TestLoss {
		t.Fatalf("the reloaded model evaluates to %+v, the trained one to accuracy %v loss %v", again, final.TestAccuracy, final.TestLoss)
	}

	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Log("no /usr/bin/python3: numpy check skipped")
		return
	}
	if exec.Command("/usr/bin/python3", "-c", "import numpy").Run() != nil {
		t.Log("no numpy: numpy check skipped")
		return
	}
	py, err := exec.Command("/usr/bin/python3", "-c", evalNumPy, model, strconv.Itoa(samples/6), train.FashionMNISTDir).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy: %v\n%s", err, py)
	}
	right, err := strconv.Atoi(strings.TrimSpace(string(py)))
	if err != nil {
		t.Fatalf("numpy printed %q", py)
	}
	// Summation order differs between numpy and the Go kernels: a
	// sample whose two best classes tie to float32 rounding may flip.
	if goRight := final.TestAccuracy * samples / 6; math.Abs(float64(right)-goRight) > 2 {
		t.Fatalf("numpy classifies %d of %d right, sparcml %.0f", right, samples/6, goRight)
	}
}

// Bad input fails every rank with the file and line, never hangs: a
// rank whose shard is bad stops the others through the agreement after
// loading.
func TestTrainBadInputFailsEveryRank(t *testing.T) {
	sparcmlBinary(t)
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var good strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&good, "%d %d:1 %d:0.5\n", 2*(i%2)-1, 1+i%7, 8+i%5)
	}
	lines := strings.Split(strings.TrimSuffix(good.String(), "\n"), "\n")
	with := func(at int, line string) []byte {
		l := append([]string{}, lines...)
		l[at-1] = line
		return []byte(strings.Join(l, "\n") + "\n")
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(good.String()))
	zw.Close()
	gz := z.Bytes()
	goodFile := write("good.svm", []byte(good.String()))

	for _, c := range []struct {
		name string
		args []string
		want string // in every rank's message
	}{
		{"malformed line", []string{"--data", write("a.svm", with(250, "1 3:x"))}, "a.svm:250: bad data: feature value"},
		{"index beyond --dim", []string{"--data", write("b.svm", with(120, "1 99:1")), "--dim", "20"}, "b.svm:120: bad data: feature index 99 beyond the dimension 20"},
		{"missing file", []string{"--data", filepath.Join(dir, "nope.svm")}, "nope.svm: open"},
		{"truncated gzip", []string{"--data", write("c.svm.gz", gz[:len(gz)*2/3])}, "c.svm.gz:"},
		{"label out of range", []string{"--data", write("d.svm", with(290, "7 1:1"))}, "d.svm:290: bad data: label 7 out of range"},
		{"label convention", []string{"--data", write("e.svm", with(10, "-3 1:1"))}, "e.svm:10: bad data: label -3"},
		{"class out of range", []string{"--data", write("h.svm", []byte(strings.ReplaceAll(string(with(200, "12 1:1")), "-1 ", "0 "))), "--classes", "10"}, "h.svm:200: bad data: label 12 out of range (10 classes declared)"},
		{"test file", []string{"--data", goodFile, "--test", write("f.svm", with(5, "1 2:1 2:1"))}, "f.svm:5: bad data: feature index 2 after 2"},
		{"model does not fit", []string{"--data", goodFile, "--model", "mlp", "--dim", "3000000"}, "model does not fit the data"},
		{"npz does not fit", []string{"--data", goodFile, "--load", write("g.npz", []byte("not a zip"))}, "g.npz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-n", "3", "--model", "logreg", "--epochs", "1", "--batch", "16"}, c.args...)
			out, errOut, err := runTrain(t, 2*time.Minute, args...)
			if err == nil {
				t.Fatalf("succeeded\nstdout:\n%s\nstderr:\n%s", out, errOut)
			}
			for r := 0; r < 3; r++ {
				prefix := fmt.Sprintf("sparcml train: rank %d of 3: ", r)
				found := false
				for _, line := range strings.Split(errOut, "\n") {
					if strings.HasPrefix(line, prefix) && strings.Contains(line, c.want) {
						found = true
					}
				}
				if !found {
					t.Fatalf("rank %d did not report %q\nstderr:\n%s", r, c.want, errOut)
				}
			}
		})
	}
}
