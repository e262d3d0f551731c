// Package labelset holds the label sets of multi-label data. A sample's
// label is one int64 wherever it travels — batches, a user's rows,
// augmentation's views, canaries — and says which of K labels apply:
//
//   - where K ≤ Bits (62), the set itself, bit j for label j;
//   - where K > Bits, a handle to the set's words (bit j%64 of word j/64),
//     interned once per process by Intern: the same set is the same handle,
//     and a handle means the same set to every dataset, plan and evaluator
//     of the process, so no table travels beside the labels;
//   - a partial set, one that ignores some labels (neither on nor off:
//     CheXpert's uncertain findings under U-Ignore; the loss counts
//     them not, the evaluation leaves them out), whatever K: a negative
//     label, −1 − its handle among the partial sets (OfIgnoring,
//     Ignored).
//
// Only where a set is made (the data loaders, audit's canaries, the norm
// check's synthetic samples) and where it is read (the loss head, the
// evaluation's figures) does anything look inside a label: through
// Expand, Ignored, Has and Of. Handles are not stable across processes:
// whatever is kept on disk (a data fingerprint) holds the words (Expand,
// Ignored).
package labelset
