package dptrain

import "github.com/dpfinetune/dpfinetune/dpengine"

// WrapOptimizer makes Run wrap the optimizer it builds with wrap, until
// the returned function is called.
func WrapOptimizer(wrap func(dpengine.Optimizer) dpengine.Optimizer) (restore func()) {
	wrapOptimizer = wrap
	return func() { wrapOptimizer = nil }
}
