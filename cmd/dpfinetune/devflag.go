package main

import (
	"flag"
	"strings"

	"github.com/dpfinetune/dpfinetune/runtime"
	// The CUDA backend registers --device cuda (runtime.RegisterDevice).
	_ "github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// deviceFlag is --device, shared by every command that computes.
type deviceFlag struct{ name *string }

func addDeviceFlag(fs *flag.FlagSet) deviceFlag {
	return deviceFlag{fs.String("device", "cpu", "where to compute: "+strings.Join(runtime.DeviceNames(), ", ")+" (cuda: the GPU through libcuda.so.1 and NVRTC, or its emulation with DPFINETUNE_CUDA=emulate)")}
}

// open returns the device, or a usage error (exit status 2) naming why it
// cannot be had. Commands call it right after parsing their flags, before
// reading any model or data.
func (d deviceFlag) open() (runtime.Device, error) {
	dev, err := runtime.OpenDevice(*d.name)
	if err != nil {
		return nil, usagef("--device: %v", err)
	}
	return dev, nil
}
