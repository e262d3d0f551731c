package main

import (
	"flag"
	"strings"

	"github.com/dpfinetune/dpfinetune/runtime"
	// The CUDA backend registers --device cuda (runtime.RegisterDevice).
	_ "github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// deviceFlag is --device and --tf32, shared by every command that
// computes.
type deviceFlag struct {
	name *string
	tf32 *bool
}

func addDeviceFlag(fs *flag.FlagSet) deviceFlag {
	return deviceFlag{
		name: fs.String("device", "cpu", "where to compute: "+strings.Join(runtime.DeviceNames(), ", ")+" (cuda: the first GPU through libcuda.so.1 and NVRTC, or its emulation with DPFINETUNE_CUDA=emulate; cuda:N the GPU of ordinal N, numbered as CUDA_VISIBLE_DEVICES lists them)"),
		tf32: fs.Bool("tf32", false, "--device cuda: run convolutions' forward passes and input gradients on the tensor cores in TF32, as PyTorch does by default; weight gradients, norms and clipping stay float32 (not with --mode ghost or mixed; docs/PRIVACY.md)"),
	}
}

// open returns the device, or a usage error (exit status 2) naming why it
// cannot be had. Commands call it right after parsing their flags, before
// reading any model or data.
func (d deviceFlag) open() (runtime.Device, error) {
	dev, err := runtime.OpenDevice(*d.name)
	if err != nil {
		return nil, usagef("--device: %v", err)
	}
	if *d.tf32 {
		t, ok := dev.(runtime.TF32Device)
		if !ok {
			return nil, usagef("--tf32: device %s has no TF32 products (use --device cuda)", *d.name)
		}
		t.SetTF32(true)
	}
	return dev, nil
}

// allowNondeterministic lets dev take algorithms whose results may differ
// in their last bits from run to run (cuDNN's atomics-based ones, which
// PyTorch allows by default), for a run that does not repeat anyway:
// train and audit with secure noise (no --seed), whose noise no two runs
// share, and bench, which times such runs. A seeded run keeps to
// deterministic algorithms and repeats bit for bit on one machine, as do
// eval, predict and norms; DPFINETUNE_CUDNN_DETERMINISTIC=on or off fixes
// the choice for every command.
func allowNondeterministic(dev runtime.Device) {
	if d, ok := dev.(runtime.DeterministicDevice); ok {
		d.SetDeterministic(false)
	}
}
