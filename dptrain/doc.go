// Package dptrain is the training loop of dpfinetune: given a model graph,
// a dataset and the privacy settings, it calibrates σ (or takes it as
// given), rewrites and compiles the model, and runs the epochs of
// Poisson-sampled logical batches through a dpengine.Engine, with a
// learning-rate schedule (Schedule), per-epoch evaluation, checkpoints
// (every epoch, on interruption, and every so many steps or minutes),
// resume and a run report; then it exports the trained model, or the
// moving average of its parameters (Settings.EMADecay). Where the trained
// part follows a frozen one, it computes the frozen part's outputs once per
// example, in memory or on disk, and trains the trained part alone on them
// (Settings.FeatureCache, features.go); a FeatureStore keeps them for the
// next run over the same frozen part and data (a search's runs). Where the data names each
// example's user, the units it samples, clips and accounts are users: a
// sampled user's examples are rows of the batch whose mean gradient is
// clipped as one (Settings.PrivacyUnit, users.go).
//
// It also evaluates models (Evaluator: the figures of EvalResult, held to
// scikit-learn's; groups of examples such as a study's views scored as
// one, grouped.go; ROC curves and operating points chosen by a rule,
// operating.go), calibrates them (Evaluator.FitTemperature and
// ApplyTemperature: temperature scaling; FitLabelScaling and
// ApplyLabelScaling: Platt scaling of each label; calibrate.go) and
// compares two on the same examples (CompareAUCs, CompareRight:
// compare.go); Evaluator.Bootstrap gives every figure's bootstrap
// interval (bootstrap.go).
//
// It is what "dpfinetune train" and "dpfinetune audit" run, and what a Go
// program embeds to fine-tune a model privately (the role of Opacus's
// make_private): fill a Config, call Run, and follow the run through
// Config.Events.
//
// In the data flow of DESIGN.md §2 it sits after dpengine: it imports
// onnx, graph, rewrite, dpengine and its accountant and data packages, and
// only the command imports it.
package dptrain
