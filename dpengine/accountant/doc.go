// Package accountant computes the privacy spent by DP-SGD style training:
// T steps of the Poisson-subsampled Gaussian mechanism, in which every
// example joins a step's logical batch independently with probability q and
// Gaussian noise of standard deviation σ·C (C the clipping norm) is added
// once to the sum of the clipped per-example gradients of that logical batch.
// σ is the noise multiplier; the neighbouring relation is add-or-remove-one.
//
// Three accountants are provided, selected by name:
//
//   - "rdp": Rényi DP of the subsampled Gaussian mechanism computed exactly
//     (Mironov, Talwar, Zhang 2019) for integer and fractional orders over a
//     fixed order grid, composed by addition, and converted to (ε, δ) with
//     the improved conversion of Balle et al. 2020 / Canonne, Kamath,
//     Steinke 2020 (the classic conversion of Mironov 2017 is available).
//     The reported order is the one that attains the minimum.
//   - "prv": numerical composition of privacy loss random variables (Gopi,
//     Lee, Wutschitz 2021): the privacy loss distribution of one step is
//     discretised on a grid and composed by FFT. It reports a lower bound,
//     an estimate and an upper bound on the true ε; Epsilon is the upper
//     bound, which holds up to the stated error parameters.
//   - "gdp": the central-limit approximation of Gaussian DP (Dong, Roth, Su
//     2019; Bu et al. 2020). It is an approximation, not a bound, can
//     underestimate ε, and is labelled "approximate (CLT)" wherever it is
//     printed.
//
// A run whose σ or q changes (for example a resumed run with other
// settings) is a list of phases (σ, q, steps); every accountant accounts it
// as the composition of its phases. The list of phases, together with the
// accountant's name and options, is its State, which is what a training
// checkpoint stores: restoring a State gives the identical ε.
//
// SearchEpsilon bounds a private random search over settings — the best of
// a random, secret number K of runs (K drawn from Trials, Papernot and
// Steinke's truncated negative binomial), each scored with Gaussian noise —
// by their Theorem 2 over the RDP curve of one run, and CalibrateSearch
// finds the runs' σ for a target ε of the whole search.
//
// CalibrateSigma and Calibrate find the smallest noise multiplier (to a
// relative tolerance) whose ε does not exceed a target; the σ returned has
// been checked to meet the target.
package accountant
