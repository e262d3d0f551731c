// Package numcheck holds what several packages' tests use to compare the
// numbers of two devices or of a device and a golden file: the relative
// error metric (RelErr), bit-for-bit equality (SameBits), the fixture
// models with their golden inputs (FixtureNames, LoadFixture), and one
// fixture's forward, loss and backward on a device compared with another
// device's (RunPlan, ComparePlans).
//
// It is ordinary (non-test) code so that the tests of runtime/reference,
// runtime/cuda, dpengine and dptrain can import it; nothing else should.
// It computes on the host from values already copied out of a device, and
// imports neither runtime/kernels nor runtime/blas: the reference backend's
// tests use it to check the CPU backend, so it must share no code with it.
package numcheck
