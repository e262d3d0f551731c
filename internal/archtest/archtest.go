// Package archtest checks the module's layering rules on its source: the
// rules DESIGN.md states between packages, which the compiler does not
// enforce. Its test runs the checks on this module.
//
// The rules checked today: only packages under runtime/ import the CPU
// kernels (runtime/kernels, runtime/blas), since everything above the
// runtime computes through a runtime.Device and its operation sets
// (runtime.Ops), so that a second backend can replace the CPU without
// touching the engine; and the reference backend (runtime/reference)
// imports none of the CPU backend's kernels, BLAS or noise generator, so
// that holding the CPU to it checks something.
package archtest

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DeviceInternals are the packages, relative to the module path, that
// only packages under DeviceOwner may import.
var DeviceInternals = []string{"runtime/kernels", "runtime/blas"}

// DeviceOwner is the directory, relative to the module root, whose
// packages implement the devices.
const DeviceOwner = "runtime"

// Offender is one import that breaks a layering rule.
type Offender struct {
	File   string // relative to the module root, slash-separated
	Import string // the imported path
}

// String formats the offence for a test failure.
func (o Offender) String() string { return o.File + " imports " + o.Import }

// DeviceImports returns every import of a DeviceInternals package by a Go
// file (test files included) outside DeviceOwner in the module rooted at
// root, sorted by file. Directories the go tool ignores (testdata, vendor,
// names starting with "." or "_") and nested modules are skipped.
func DeviceImports(root string) ([]Offender, error) {
	return forbiddenImports(root, DeviceInternals, func(rel string) bool {
		return rel != DeviceOwner && !strings.HasPrefix(rel, DeviceOwner+"/")
	}, true)
}

// ReferenceBackend is the directory, relative to the module root, of the
// reference backend (runtime/reference): the oracle the CPU backend, and
// the backends after it, are tested against.
const ReferenceBackend = "runtime/reference"

// ReferenceForbidden are the packages, relative to the module path, that
// the reference backend's code may not import: the CPU backend's kernels,
// its BLAS and its noise generator. A reference that called them would
// agree with the CPU by construction and check nothing; it is written from
// the operators' definitions instead (runtime/reference's doc.go).
var ReferenceForbidden = []string{"runtime/kernels", "runtime/blas", "runtime/noise"}

// ReferenceImports returns every import of a ReferenceForbidden package
// (or a package below one) by a non-test Go file of ReferenceBackend or a
// directory below it in the module rooted at root, sorted by file. Test
// files may import them: they compare the reference with the CPU.
func ReferenceImports(root string) ([]Offender, error) {
	return forbiddenImports(root, ReferenceForbidden, func(rel string) bool {
		return rel == ReferenceBackend || strings.HasPrefix(rel, ReferenceBackend+"/")
	}, false)
}

// forbiddenImports returns every import of a forbidden package (relative
// to the module path; a package below one counts) by a Go file in a
// directory for which inScope holds (the module root is "."), test files
// only when tests is set, sorted by file. Directories the go tool ignores
// (testdata, vendor, names starting with "." or "_") and nested modules
// are skipped.
func forbiddenImports(root string, internals []string, inScope func(dir string) bool, tests bool) ([]Offender, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var forbidden []string
	for _, p := range internals {
		forbidden = append(forbidden, module+"/"+p)
	}
	var out []Offender
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || !tests && strings.HasSuffix(rel, "_test.go") || !inScope(pathDir(rel)) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("archtest: %w", err)
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("archtest: %s: import %s: %w", rel, imp.Path.Value, err)
			}
			for _, fb := range forbidden {
				if ip == fb || strings.HasPrefix(ip, fb+"/") {
					out = append(out, Offender{File: rel, Import: ip})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Import < out[j].Import
	})
	return out, nil
}

// pathDir is the slash-separated directory of a slash-separated relative
// path ("." for a file at the root).
func pathDir(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return "."
}

// modulePath reads the module directive of a go.mod file.
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", fmt.Errorf("archtest: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			if p, err := strconv.Unquote(fields[1]); err == nil {
				return p, nil
			}
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("archtest: %s: %w", gomod, err)
	}
	return "", fmt.Errorf("archtest: %s has no module directive", gomod)
}
