package cuda

import "github.com/dpfinetune/dpfinetune/runtime"

// DeviceName is the --device name of the CUDA backend.
const DeviceName = "cuda"

// init registers the backend: runtime.OpenDevice("cuda") opens the first
// GPU through its driver, or the emulation when DPFINETUNE_CUDA=emulate,
// and "cuda:N" GPU N (OpenOrdinal), and says why it cannot be had.
func init() {
	runtime.RegisterDeviceOrdinals(DeviceName, func(ordinal int) (runtime.Device, error) {
		d, err := OpenOrdinal(ordinal)
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}
