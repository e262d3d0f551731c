package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// childArgsEnv makes the test binary act as the dpfinetune binary: the
// variable holds the arguments, one a line. Tests run commands in a child
// process to measure its peak memory, which the child writes to the file
// named by childRSSEnv.
const (
	childArgsEnv = "DPFINETUNE_TEST_CHILD_ARGS"
	childRSSEnv  = "DPFINETUNE_TEST_CHILD_RSS"
)

func TestMain(m *testing.M) {
	if a, ok := os.LookupEnv(childArgsEnv); ok {
		code := runMain(strings.Split(a, "\n"), os.Stdout, os.Stderr)
		if path := os.Getenv(childRSSEnv); path != "" {
			if err := os.WriteFile(path, []byte(peakRSS()), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = exitError
			}
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// peakRSS returns the process's peak resident memory (VmHWM of
// /proc/self/status, "123 kB"). The rusage of a child is no measure on
// Linux: a child started with vfork inherits its parent's high-water mark,
// which for a test binary is the whole suite's.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// maxChildRSS is the peak resident memory any command may reach on a
// hostile input (the test binary itself takes about 15 MiB).
const maxChildRSS = 200 << 20

// runChild runs dpfinetune with args in a child process and returns its
// stderr, exit status and peak resident memory in bytes.
func runChild(t *testing.T, args ...string) (stderr string, code int, rss int64) {
	t.Helper()
	rssFile := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, "\n"), childRSSEnv+"="+rssFile)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatalf("child wrote no peak RSS: %v (stderr %q)", err, e.String())
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(string(b), " kB"), 10, 64)
	if err != nil {
		t.Skipf("no VmHWM in /proc/self/status (%q): peak memory not measurable here", b)
	}
	return e.String(), cmd.ProcessState.ExitCode(), kb << 10
}

// TestHostileModels runs every command that reads a model on one model per
// class of absurd size (internal/hostile, the bomb of issue 15 first): each
// must exit with status 1 and a one-line error naming the limit, never
// panic, and stay under maxChildRSS. The one class within the per-tensor
// limit (a plan larger than the machine) is only an error where buffers
// are planned: inspect and plan describe it. weights reads only the
// initializers, and writes them without computing any value.
func TestHostileModels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 30 child processes")
	}
	dir := t.TempDir()
	x := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(x, npy.NewFloat32(make([]float32, 2*28*28), 2, 1, 28, 28)); err != nil {
		t.Fatal(err)
	}
	y := filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(y, npy.NewInt64([]int64{1, 2}, 2)); err != nil {
		t.Fatal(err)
	}
	for _, c := range hostile.Models() {
		b, err := proto.Marshal(c.Proto)
		if err != nil {
			t.Fatal(err)
		}
		model := filepath.Join(dir, c.Name+".onnx")
		if err := os.WriteFile(model, b, 0o644); err != nil {
			t.Fatal(err)
		}
		cmds := [][]string{
			{"inspect", "--model", model, "--input-shape", "1,28,28"},
			{"weights", "--model", model, "--input-shape", "1,28,28", "--out", filepath.Join(dir, "w.pt")},
			{"plan", "--model", model, "--input-shape", "1,28,28", "--batch", "2", "--num-classes", "10"},
			{"predict", "--model", model, "--input", x, "--out", filepath.Join(dir, "out.npy"), "--batch", "2"},
			{"norms", "--model", model, "--input", x, "--labels", y, "--batch", "2"},
			{"train", "--model", model, "--data", "idx:../../testdata/fmnist-small:limit=64", "--test-data", "none",
				"--epsilon", "3", "--batch-size", "4", "--physical-batch", "2", "--quiet", "--out", filepath.Join(dir, "tuned.onnx")},
		}
		for _, args := range cmds {
			t.Run(c.Name+"/"+args[0], func(t *testing.T) {
				stderr, code, rss := runChild(t, args...)
				line := strings.TrimSpace(stderr)
				t.Logf("exit %d, peak RSS %d MiB: %s", code, rss>>20, line)
				if rss > maxChildRSS {
					t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, maxChildRSS>>20)
				}
				if c.Name == "plan" && (args[0] == "inspect" || args[0] == "plan") || args[0] == "weights" {
					// Shapes and estimates only, nothing allocated:
					// inspect and plan describe the 128 GiB value; weights
					// reads the initializers alone, none of the absurd
					// values computed from them.
					if code != exitOK {
						t.Errorf("exit status %d, want 0", code)
					}
					return
				}
				if code != exitError {
					t.Errorf("exit status %d, want %d", code, exitError)
				}
				if strings.Count(line, "\n") > 0 || !strings.HasPrefix(line, "dpfinetune "+args[0]+": ") || !strings.Contains(line, c.Want) {
					t.Errorf("stderr %q: want one line naming %q", stderr, c.Want)
				}
			})
		}
	}
}

// TestHostileData runs the commands that read data on one file per
// class of absurd size (a .npy header of 512 GiB, an IDX header of 512
// GiB, a PNG claiming 2²⁰×2²⁰ pixels, a sparse 1 TiB CIFAR batch): exit 1,
// one line naming the file and the limit, peak RSS under maxChildRSS.
func TestHostileData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	dir := t.TempDir()
	cnn := "../../testdata/models/cnn.onnx"
	write := func(path string, b []byte) string {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bombNPY := write(filepath.Join(dir, "x.npy"), hostile.NPY([]int64{1 << 27, 1, 32, 32}, []byte("abc")))
	labels := filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(labels, npy.NewInt64([]int64{1, 2}, 2)); err != nil {
		t.Fatal(err)
	}
	idxDir := filepath.Join(dir, "idx")
	write(filepath.Join(idxDir, "train-images-idx3-ubyte"), hostile.IDX([]uint32{1 << 19, 1 << 10, 1 << 10}, make([]byte, 16)))
	write(filepath.Join(idxDir, "train-labels-idx1-ubyte"), hostile.IDX([]uint32{4}, []byte{0, 1, 2, 3}))
	folder := filepath.Join(dir, "folder")
	write(filepath.Join(folder, "a", "1.png"), hostile.PNG(1, 1))
	write(filepath.Join(folder, "b", "bomb.png"), hostile.PNG(1<<20, 1<<20))
	dicoms := filepath.Join(dir, "dicoms")
	write(filepath.Join(dicoms, "a", "1.png"), hostile.PNG(1, 1))
	write(filepath.Join(dicoms, "b", "IM0001"), hostile.DICOM(65535, 65535))
	// 2³¹−1 frames of 2×2 claimed over 16 bytes of pixel data.
	cine := filepath.Join(dir, "cine")
	write(filepath.Join(cine, "a", "1.png"), hostile.PNG(1, 1))
	write(filepath.Join(cine, "b", "IM0002"), hostile.DICOMFrames(2, 2, 1<<31-1))
	// 16 GiB of float64 voxels claimed over 16 bytes, gzip-compressed;
	// 65537 slices of 2×2 over the same 16.
	volumes := filepath.Join(dir, "volumes")
	write(filepath.Join(volumes, "a", "1.png"), hostile.PNG(1, 1))
	write(filepath.Join(volumes, "b", "bomb.nii.gz"), hostile.NIfTIGz(1<<14, 1<<14, 8))
	slabs := filepath.Join(dir, "slabs")
	write(filepath.Join(slabs, "a", "1.png"), hostile.PNG(1, 1))
	write(filepath.Join(slabs, "b", "slabs.nii.gz"), hostile.NIfTIGz(2, 2, 1<<16+1))
	cifar := filepath.Join(dir, "cifar")
	f, err := os.Create(write(filepath.Join(cifar, "data_batch_1.bin"), nil))
	if err != nil {
		t.Fatal(err)
	}
	sparse := f.Truncate(1<<40) == nil
	f.Close()
	train := func(spec string) []string {
		return []string{"train", "--model", cnn, "--data", spec, "--test-data", "none", "--epsilon", "3", "--batch-size", "4",
			"--quiet", "--out", filepath.Join(dir, "tuned.onnx"), "--num-classes", "2"}
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"predict npy 512 GiB", []string{"predict", "--model", cnn, "--input", bombNPY, "--out", filepath.Join(dir, "out.npy")}, []string{bombNPY, "memory available"}},
		{"norms npy 512 GiB", []string{"norms", "--model", cnn, "--input", bombNPY, "--labels", labels}, []string{bombNPY, "memory available"}},
		{"train idx 512 GiB", train("idx:" + idxDir), []string{"train-images-idx3-ubyte", "memory available"}},
		{"train png 2^20×2^20", train("folder:" + folder), []string{"bomb.png", "1048576×1048576"}},
		{"eval png 2^20×2^20", []string{"eval", "--model", cnn, "--data", "folder:" + folder + ":split=train"}, []string{"bomb.png", "1048576×1048576"}},
		{"train dicom 65535×65535", train("folder:" + dicoms), []string{"IM0001", "65535×65535", "over the limit"}},
		{"predict dicom 65535×65535", []string{"predict", "--model", cnn, "--images", filepath.Join(dicoms, "b")}, []string{"IM0001", "65535×65535", "over the limit"}},
		{"train dicom 2^31 frames, all", append(train("folder:"+cine), "--frame", "all"), []string{"IM0002", "2147483647 frames"}},
		{"train dicom 2^31 frames, max", append(train("folder:"+cine), "--frame", "max"), []string{"IM0002", "2147483647 frames"}},
		{"predict dicom 2^31 frames, all", []string{"predict", "--model", cnn, "--frame", "all", "--images", filepath.Join(cine, "b")}, []string{"IM0002", "2147483647 frames"}},
		{"train nifti.gz 16 GiB, middle", append(train("folder:"+volumes), "--frame", "middle"), []string{"bomb.nii.gz"}},
		{"predict nifti.gz 16 GiB, max", []string{"predict", "--model", cnn, "--frame", "max", "--images", filepath.Join(volumes, "b")}, []string{"bomb.nii.gz"}},
		{"train nifti.gz 65537 slices, all", append(train("folder:"+slabs), "--frame", "all"), []string{"slabs.nii.gz", "65537 slices"}},
		{"train nifti.gz 65537 slices, max", append(train("folder:"+slabs), "--frame", "max"), []string{"slabs.nii.gz", "a volume of 65537 slices, over the limit"}},
	}
	if sparse {
		cases = append(cases, struct {
			name string
			args []string
			want []string
		}{"train cifar sparse 1 TiB", train("cifar10:" + cifar), []string{"data_batch_1.bin", "memory available"}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stderr, code, rss := runChild(t, c.args...)
			line := strings.TrimSpace(stderr)
			t.Logf("exit %d, peak RSS %d MiB: %s", code, rss>>20, line)
			if code != exitError || strings.Contains(line, "\n") || !strings.HasPrefix(line, "dpfinetune "+c.args[0]+": ") {
				t.Errorf("exit %d, stderr %q: want status 1 and one line", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(line, w) {
					t.Errorf("stderr %q does not name %q", line, w)
				}
			}
			if rss > maxChildRSS {
				t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, maxChildRSS>>20)
			}
		})
	}
}

// TestPanicIsBug: a panic in a command is reported as a bug with exit
// status exitBug, not as a Go crash (exit 2, which reads as a usage error).
func TestPanicIsBug(t *testing.T) {
	register(&command{name: "test-panic", run: func([]string, io.Writer) error {
		var s []int
		_ = s[3]
		return nil
	}})
	defer delete(commands, "test-panic")
	_, stderr, code := run(t, "test-panic")
	if code != exitBug || !strings.HasPrefix(stderr, "dpfinetune: internal error (a bug") || !strings.Contains(stderr, "index out of range") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestErrorsOnOneLine: a message holding a newline (a file name, a
// wrapped error) is printed on one line.
func TestErrorsOnOneLine(t *testing.T) {
	_, stderr, code := run(t, "inspect", "--model", "no\nsuch.onnx")
	if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no such.onnx") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// copyFMNIST copies the Fashion-MNIST slice to a temporary directory.
func copyFMNIST(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "../../testdata/fmnist-small"
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".gz") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// relabel writes a plain train-labels file beside the .gz one (the plain
// file takes precedence) with the first label changed: the same number
// of examples, other data.
func relabel(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "train-labels-idx1-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	b[8] = (b[8] + 1) % 10 // the first label, after magic and count
	if err := os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResumeRefusesCorruptState is the test: the demo CNN's
// checkpoint with one byte XOR 0x10 at its midpoint must be refused, not
// resumed into wrong weights or a wrong ε; so must a resume on changed
// training data, and a data file rewritten between epochs stops the run.
func TestResumeRefusesCorruptState(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the fixture CNN")
	}
	args := func(data, out string, extra ...string) []string {
		a := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", "idx:" + data + ":limit=512", "--test-data", "none",
			"--epsilon", "3", "--epochs", "2", "--batch-size", "64", "--physical-batch", "32", "--seed", "5", "--quiet", "--out", out}
		return append(a, extra...)
	}
	stopAfterEpoch1 := func() {
		afterStep = func(step int64) {
			if step == 8 { // the end of the first epoch (8 steps of 64 from 512)
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				time.Sleep(time.Second)
			}
		}
	}

	t.Run("checkpoint midpoint XOR 0x10", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "cnn.onnx")
		stopAfterEpoch1()
		_, e, code := run(t, args(copyFMNIST(t), out)...)
		afterStep = nil
		if code != exitError || !strings.Contains(e, "interrupted") {
			t.Fatalf("exit %d: %s", code, e)
		}
		ckpt := out + ".ckpt"
		b, err := os.ReadFile(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x10
		if err := os.WriteFile(ckpt, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, e, code = run(t, args(copyFMNIST(t), out, "--resume")...)
		t.Logf("exit %d: %s", code, e)
		if code != exitError || !strings.Contains(e, "integrity check failed") || !strings.Contains(e, ckpt) {
			t.Errorf("resume of a corrupt checkpoint: exit %d: %s", code, e)
		}
		if _, err := os.Stat(out); err == nil {
			t.Error("a model was written from a corrupt checkpoint")
		}
	})

	t.Run("data changed before resume", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "cnn.onnx")
		data := copyFMNIST(t)
		stopAfterEpoch1()
		_, e, code := run(t, args(data, out)...)
		afterStep = nil
		if code != exitError || !strings.Contains(e, "interrupted") {
			t.Fatalf("exit %d: %s", code, e)
		}
		relabel(t, data)
		_, e, code = run(t, args(data, out, "--resume")...)
		t.Logf("exit %d: %s", code, e)
		if code != exitError || !strings.Contains(e, "the training data changed") {
			t.Errorf("resume on changed data: exit %d: %s", code, e)
		}
	})

	t.Run("data rewritten between epochs", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "cnn.onnx")
		data := copyFMNIST(t)
		afterStep = func(step int64) {
			if step == 8 {
				relabel(t, data)
				// A new file with a new time: the loaded one was the .gz,
				// so touch that too.
				later := time.Now().Add(time.Minute)
				os.Chtimes(filepath.Join(data, "train-labels-idx1-ubyte.gz"), later, later)
			}
		}
		_, e, code := run(t, args(data, out)...)
		afterStep = nil
		t.Logf("exit %d: %s", code, e)
		if code != exitError || !strings.Contains(e, "epoch 2") || !strings.Contains(e, "changed since it was loaded") {
			t.Errorf("exit %d: %s", code, e)
		}
	})
}

// TestMutatedFixturesAreNotBugs runs inspect, plan and predict on every
// fixture under one mutation of each kind (internal/hostile.Mutate, the
// mutations FuzzPipeline makes): each may succeed or fail with status 1
// or 2, never reach the bug handler (status 70), and fail on one line.
func TestMutatedFixturesAreNotBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 288 commands")
	}
	paths, _ := filepath.Glob("../../testdata/models/*.onnx")
	if len(paths) == 0 {
		t.Fatal("no fixtures")
	}
	dir := t.TempDir()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".onnx")
		sample := "3,32,32"
		if name == "cnn" {
			sample = "1,28,28"
		}
		x := filepath.Join(dir, name+"-x.npy")
		dims := []int{2}
		for _, s := range strings.Split(sample, ",") {
			d, _ := strconv.Atoi(s)
			dims = append(dims, d)
		}
		if err := npy.WriteFile(x, npy.NewFloat32(make([]float32, dims[0]*dims[1]*dims[2]*dims[3]), dims...)); err != nil {
			t.Fatal(err)
		}
		for kind := byte(0); kind < 12; kind++ {
			m := &onnxpb.ModelProto{}
			if err := proto.Unmarshal(b, m); err != nil {
				t.Fatal(err)
			}
			hostile.Mutate(m, []byte{kind, 5 * kind, 3*kind + 1})
			mb, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			model := filepath.Join(dir, fmt.Sprintf("%s-%d.onnx", name, kind))
			if err := os.WriteFile(model, mb, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"inspect", "--model", model, "--input-shape", sample},
				{"plan", "--model", model, "--input-shape", sample, "--batch", "2"},
				{"predict", "--model", model, "--input", x, "--out", filepath.Join(dir, "y.npy"), "--batch", "2"},
			} {
				_, stderr, code := run(t, args...)
				if code == exitBug || (code != exitOK && strings.Count(stderr, "\n") != 1) {
					t.Errorf("%s on %s mutated by kind %d: exit %d: %s", args[0], name, kind, code, stderr)
				}
			}
		}
	}
}
