package cuda

import "github.com/dpfinetune/dpfinetune/runtime"

// DeviceName is the --device name of the CUDA backend.
const DeviceName = "cuda"

// init registers the backend: runtime.OpenDevice("cuda") opens the GPU
// through its driver, or the emulation when DPFINETUNE_CUDA=emulate (Open),
// and says why neither can be had.
func init() {
	runtime.RegisterDevice(DeviceName, func() (runtime.Device, error) {
		d, err := Open()
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}
