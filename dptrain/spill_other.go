//go:build !unix

package dptrain

import "errors"

var errNoSpill = errors.New("a feature cache on disk needs a Unix system")

func diskFree(string) (int64, error) { return 0, errNoSpill }

func spillFloats(string, int) ([]float32, func() error, error) { return nil, nil, errNoSpill }
