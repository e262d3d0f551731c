package cuda

import "errors"

// Real returns the driver of the machine's GPU.
func Real() (Driver, error) { return nil, errors.New("cuda: no CUDA driver yet") }
