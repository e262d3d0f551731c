package archtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestNoDeviceInternalsAboveRuntime: no package outside runtime/ imports
// the CPU kernels; the DP engine and everything above it compute through
// the device (runtime.DPOps).
func TestNoDeviceInternalsAboveRuntime(t *testing.T) {
	offenders, err := DeviceImports(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		lines := make([]string, len(offenders))
		for i, o := range offenders {
			lines[i] = o.String()
		}
		t.Errorf("packages outside runtime/ import its kernels; call them through runtime.Device / runtime.DPOps instead:\n\t%s", strings.Join(lines, "\n\t"))
	}
}

// TestReferenceBackendIsIndependent: the reference backend's code imports
// none of the CPU backend's kernels, BLAS or noise generator, so that it
// is an independent oracle (its tests may import them to compare).
func TestReferenceBackendIsIndependent(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(ReferenceBackend))); err != nil {
		t.Fatalf("the reference backend is not where the rule looks: %v", err)
	}
	offenders, err := ReferenceImports(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		lines := make([]string, len(offenders))
		for i, o := range offenders {
			lines[i] = o.String()
		}
		t.Errorf("the reference backend imports the CPU backend's internals; write the operation from its definition instead:\n\t%s", strings.Join(lines, "\n\t"))
	}
}

// TestReferenceImportsFindsOffenders runs the reference rule on small
// module trees: code of the backend and of a package below it is caught,
// its tests and everything outside it are not.
func TestReferenceImportsFindsOffenders(t *testing.T) {
	src := func(imports ...string) string {
		s := "package p\n\nimport (\n"
		for _, i := range imports {
			s += "\t_ \"" + i + "\"\n"
		}
		return s + ")\n"
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []Offender
	}{
		{"clean", map[string]string{
			"runtime/reference/a.go":      src("example.com/m/runtime", "crypto/aes"),
			"runtime/reference/a_test.go": src("example.com/m/runtime/noise", "example.com/m/runtime/kernels"),
			"runtime/device.go":           src("example.com/m/runtime/kernels", "example.com/m/runtime/noise"),
			"runtime/referencex/a.go":     src("example.com/m/runtime/kernels"),
			"runtime/reference/x/a.go":    src("example.com/m/runtime/noisex"),
		}, nil},
		{"offenders", map[string]string{
			"runtime/reference/a.go":          src("example.com/m/runtime/kernels", "example.com/m/runtime/blas"),
			"runtime/reference/sub/b.go":      src("example.com/m/runtime/noise", "example.com/m/runtime/blas/x"),
			"runtime/reference/testdata/c.go": src("example.com/m/runtime/kernels"),
		}, []Offender{
			{"runtime/reference/a.go", "example.com/m/runtime/blas"},
			{"runtime/reference/a.go", "example.com/m/runtime/kernels"},
			{"runtime/reference/sub/b.go", "example.com/m/runtime/blas/x"},
			{"runtime/reference/sub/b.go", "example.com/m/runtime/noise"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := writeTree(t, c.files)
			got, err := ReferenceImports(root)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// writeTree writes files (slash-separated paths relative to the root) and
// a go.mod of module example.com/m to a temporary directory and returns
// it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{"go.mod": "module example.com/m\n\ngo 1.22\n"}
	for k, v := range files {
		all[k] = v
	}
	for name, text := range all {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDeviceImportsFindsOffenders runs the check on small module trees,
// so that a check that finds nothing is known to be able to find
// something.
func TestDeviceImportsFindsOffenders(t *testing.T) {
	const mod = "module example.com/m\n\ngo 1.22\n"
	src := func(imports ...string) string {
		s := "package p\n\nimport (\n"
		for _, i := range imports {
			s += "\t_ \"" + i + "\"\n"
		}
		return s + ")\n"
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []Offender
	}{
		{"clean", map[string]string{
			"dpengine/a.go":         src("example.com/m/runtime", "fmt"),
			"runtime/device.go":     src("example.com/m/runtime/kernels", "example.com/m/runtime/blas"),
			"runtime/kernels/k.go":  src("example.com/m/runtime/blas"),
			"other/kernels_note.go": src("example.com/m/runtime/kernelsx"),
		}, nil},
		{"engine and test file", map[string]string{
			"dpengine/a.go":      src("example.com/m/runtime/kernels"),
			"dpengine/b_test.go": src("example.com/m/runtime/blas", "example.com/m/runtime/blas/sub"),
			"runtime/ops.go":     src("example.com/m/runtime/kernels"),
		}, []Offender{
			{"dpengine/a.go", "example.com/m/runtime/kernels"},
			{"dpengine/b_test.go", "example.com/m/runtime/blas"},
			{"dpengine/b_test.go", "example.com/m/runtime/blas/sub"},
		}},
		{"ignored directories", map[string]string{
			"dpengine/testdata/x.go": src("example.com/m/runtime/kernels"),
			"_old/x.go":              src("example.com/m/runtime/kernels"),
			".cache/x.go":            src("example.com/m/runtime/kernels"),
			"nested/go.mod":          "module example.com/n\n",
			"nested/x.go":            src("example.com/m/runtime/kernels"),
			"cmd/tool/main.go":       src("example.com/m/runtime/blas"),
		}, []Offender{{"cmd/tool/main.go", "example.com/m/runtime/blas"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"go.mod": mod}
			for k, v := range c.files {
				files[k] = v
			}
			for name, text := range files {
				p := filepath.Join(root, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := DeviceImports(root)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestDeviceImportsErrors: a tree without a module or with a Go file that
// does not parse is an error naming the file, not a pass.
func TestDeviceImportsErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := DeviceImports(root); err == nil || !strings.Contains(err.Error(), "go.mod") {
		t.Errorf("no go.mod: got %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bad.go"), []byte("package p\nimport (\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceImports(root); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Errorf("bad file: got %v", err)
	}
}
