// Package audit checks a private training run empirically: privacy
// auditing with one training run (Steinke, Nasr & Jagielski, "Privacy
// Auditing with One (1) Training Run", NeurIPS 2023).
//
// m canaries are drawn, each included in the training data independently
// with probability ½; one run of the dptrain loop trains on the data and
// the included canaries; each canary then gets a score, the auditor guesses
// "included" for the k+ highest scores and "excluded" for the k− lowest,
// and the number of correct guesses gives, through the paper's analysis, a
// lower bound on ε that holds with the chosen confidence. A bound above the
// ε the accountant claims means the mechanism is not what the accountant
// assumes (a bug in clipping, noise or sampling); a bound below it proves
// nothing more than that this audit did not catch a problem.
//
// Two kinds of canaries:
//
//   - Gradient (white box): Dirac canaries, each a per-sample gradient that
//     is zero but at one coordinate of the trainable parameters, injected
//     into the clipped sum before the noise (dpengine.DiracCanary). The
//     score is the sum over steps of the private gradient at that
//     coordinate: the auditor sees every noisy update. This is the
//     strongest test of the clipping and noise code.
//   - Input (black box): mislabeled examples, images given a random wrong
//     label. The score is minus the trained model's loss on them: the
//     auditor sees only the final model.
//
// The canaries are units of the run's privacy unit: at user level (data
// that names users) each is a user of its own — a gradient canary a user
// of one Dirac gradient, an input canary a user of one mislabeled image —
// and the bound is on the ε per user.
package audit
