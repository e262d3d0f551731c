//go:build linux && (amd64 || arm64)

package cuda

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// dnnChoice is one measured algorithm choice: what cudnnFind…Algorithm
// chose for a shape's product, as pickAlgo took it.
type dnnChoice struct {
	Algo      int32  `json:"algo"`
	Workspace uint64 `json:"workspace_bytes"`
	// MS is cuDNN's trial time, for whoever reads the file; it decides
	// nothing once kept.
	MS float32 `json:"trial_ms"`
}

// pathChoice is one measured choice between cuDNN and a rival path for a
// shape's product (pathRival): the Device's GEMM path (EnvCUDNNGEMM), or,
// under a key beginning "per-sample ", the DP engine's unfolding path
// for the per-sample gradients cuDNN forms with the samples as groups.
type pathChoice struct {
	Library bool `json:"cudnn"`
	// LibraryMS and GEMMMS are the times it was chosen on, for whoever
	// reads the file: per product against the GEMM path, per sample
	// against the unfolding path (GEMMMS then the unfolding's).
	LibraryMS float32 `json:"cudnn_ms"`
	GEMMMS    float32 `json:"gemm_ms"`
}

// dnnChoices keeps the measured choices of one GPU model, driver and
// cuDNN (and determinism, EnvCUDNNDeterministic, and workspace bound,
// EnvCUDNNWorkspace) on disk, so that a shape is measured once per machine: the
// measurement costs a few milliseconds per product at a shape's first use
// and, where two algorithms are about as fast, could choose differently
// from run to run, and so round differently. A file that cannot be read
// or parsed is measured afresh and rewritten; one that cannot be written
// leaves the choices in memory for this run only.
type dnnChoices struct {
	path  string // "" where there is no cache directory
	head  dnnChoicesFile
	m     map[string]dnnChoice
	paths map[string]pathChoice
}

// dnnChoicesFile is the file's form.
type dnnChoicesFile struct {
	GPU    string `json:"gpu"`
	Driver int    `json:"driver"`
	CUDNN  string `json:"cudnn"`
	// Deterministic says the choices are among the deterministic
	// algorithms only (EnvCUDNNDeterministic): a file of its own.
	Deterministic bool `json:"deterministic"`
	// WorkspaceCap is the bound on an algorithm's workspace the choices
	// were made under (EnvCUDNNWorkspace): a file of its own, so that a
	// larger bound measures again rather than keep choices it excluded.
	WorkspaceCap uint64               `json:"workspace_cap_bytes"`
	Choices      map[string]dnnChoice `json:"choices"`
	// Paths are the choices between cuDNN and the GEMM path
	// (EnvCUDNNGEMM), measured with the GEMM path's kernels of hash
	// PathsKernels: a build whose kernels differ measures them afresh
	// (its GEMM path may be faster or slower), keeping the algorithms.
	Paths        map[string]pathChoice `json:"paths,omitempty"`
	PathsKernels string                `json:"paths_kernels,omitempty"`
}

// gemmPathKernels is the hash of the rival paths' kernel sources (the
// GEMM path's unfolding, folding and packing of kernels/nn.cu, the
// per-sample unfolding of kernels/persample.cu, and the header they
// share) for dnnChoicesFile.PathsKernels.
func gemmPathKernels() string {
	var srcs []string
	for _, mod := range []string{"nn.cu", "persample.cu"} {
		src, err := moduleSource(mod)
		if err != nil {
			return ""
		}
		srcs = append(srcs, src)
	}
	return cacheKey(srcs...)
}

// openDNNChoices reads the choices kept for props' GPU model and driver
// and d's cuDNN under dir (the module cache).
func openDNNChoices(dir string, props Properties, d *cudnn) *dnnChoices {
	c := &dnnChoices{m: map[string]dnnChoice{}, paths: map[string]pathChoice{}}
	c.head = dnnChoicesFile{GPU: fmt.Sprintf("%s (sm_%d%d)", props.Name, props.Major, props.Minor), Driver: props.DriverVersion, CUDNN: fmt.Sprintf("%d (%s)", d.version, d.lib), Deterministic: !d.anyAlgo, WorkspaceCap: d.maxWork}
	if dir == "" {
		return c
	}
	c.path = filepath.Join(dir, "cudnn-algos-"+cacheKey(c.head.GPU, fmt.Sprint(c.head.Driver), c.head.CUDNN, fmt.Sprint(c.head.Deterministic), fmt.Sprint(c.head.WorkspaceCap))+".json")
	c.head.PathsKernels = gemmPathKernels()
	if f, err := c.read(); err == nil {
		c.m = f.Choices
		if f.PathsKernels == c.head.PathsKernels {
			c.paths = f.Paths
		}
	}
	return c
}

func (c *dnnChoices) read() (*dnnChoicesFile, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, err
	}
	f := new(dnnChoicesFile)
	if err := json.Unmarshal(b, f); err != nil {
		return nil, err
	}
	if f.Choices == nil {
		f.Choices = map[string]dnnChoice{}
	}
	if f.Paths == nil {
		f.Paths = map[string]pathChoice{}
	}
	return f, nil
}

// get returns the choice kept under key.
func (c *dnnChoices) get(key string) (dnnChoice, bool) {
	ch, ok := c.m[key]
	// A file edited by hand: an algorithm cuDNN does not number (it has 8
	// forward, 6 backward-data, 7 backward-filter) is measured afresh.
	return ch, ok && ch.Algo >= 0 && ch.Algo < 8 && ch.Workspace <= c.head.WorkspaceCap
}

// getPath returns the path choice kept under key.
func (c *dnnChoices) getPath(key string) (pathChoice, bool) {
	ch, ok := c.paths[key]
	return ch, ok
}

// put keeps ch under key and writes the file (write).
func (c *dnnChoices) put(key string, ch dnnChoice) {
	c.m[key] = ch
	c.write()
}

// putPath keeps ch under key and writes the file (write).
func (c *dnnChoices) putPath(key string, ch pathChoice) {
	c.paths[key] = ch
	c.write()
}

// write writes the file, merged with what another run may have written
// since it was read (its choices for shapes this run has not measured).
func (c *dnnChoices) write() {
	if c.path == "" {
		return
	}
	if f, err := c.read(); err == nil {
		for k, v := range f.Choices {
			if _, ok := c.m[k]; !ok {
				c.m[k] = v
			}
		}
		for k, v := range f.Paths {
			if _, ok := c.paths[k]; !ok && f.PathsKernels == c.head.PathsKernels {
				c.paths[k] = v
			}
		}
	}
	f := c.head
	f.Choices, f.Paths = c.m, c.paths
	b, err := json.MarshalIndent(&f, "", "\t")
	if err == nil {
		_ = writeAtomic(c.path, append(b, '\n')) // unwritable: measured again next run
	}
}

// pathChoiceKey names a shape's product measured against rival in the
// file's paths.
func pathChoiceKey(k dnnKey, kind ConvKind, rival pathRival) string {
	if rival == rivalUnfolding {
		return "per-sample " + dnnChoiceKey(k, kind)
	}
	return dnnChoiceKey(k, kind)
}

// dnnChoiceKey names a shape's product in the file.
func dnnChoiceKey(k dnnKey, kind ConvKind) string {
	r := k.rank
	return fmt.Sprintf("%s n=%d c=%d m=%d group=%d in=%v kernel=%v out=%v strides=%v dilations=%v pads=%v tf32=%t",
		dnnKindName[kind], k.n, k.c, k.m, k.group, k.in[:r], k.k[:r], k.out[:r], k.st[:r], k.dil[:r], k.pad[:r], k.tf32)
}
