// Package testhook holds switches that only tests set, to break a
// mechanism on purpose and check that a check catches it. No flag, file or
// environment variable reaches them, and a program outside this module
// cannot import them.
package testhook

// NoiseDivisor, when positive, divides the noise multiplier σ that
// dptrain gives the engine, while the settings, the accountant and the
// reported ε keep the calibrated σ: a deliberately broken mechanism whose
// privacy audit must fail.
var NoiseDivisor float64

// ConvWindowsAsSamples makes dpengine take every convolution's batch rows
// for samples, as it did before it summed the rows of a sample's windows
// (EfficientViT's window attention): per-sample norms that are a window's,
// which the norm check before training must refuse.
var ConvWindowsAsSamples bool
