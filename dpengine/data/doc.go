// Package data is the dataset layer of dpfinetune train and eval: it parses
// data specs, loads image classification datasets into memory as compact
// uint8 pixels (and arrays of other samples as they are), and fills float32
// batches shaped for the model's input.
//
// The package owns:
//
//   - the spec grammar (ParseSpec, Spec, Load): SCHEME:DIR[:OPTION]... with
//     the schemes idx (MNIST / Fashion-MNIST IDX files, gzip or plain),
//     cifar10 and cifar100 (the "binary version" files) and folder (one
//     sub-directory of images per class: PNG, JPEG, BMP, TIFF, WebP or
//     Netpbm, decoded to the pixels PIL decodes — JPEG's and lossy WebP's
//     chroma filters and colour matrices are libjpeg's and libwebp's; one
//     exception: a 16-bit gray image keeps each value's high byte, where
//     PIL's convert("RGB") saturates every value over 255; and DICOM,
//     internal/dicom's 8 bits of the image through its own VOI (or
//     Fit.Window's), a multi-frame object's frame or projection as
//     Fit.Frame chooses, or each of its frames a sample with its file's
//     label (Fit.Frame "all", frames.go: a file's frames decoded in one
//     pass, each file a user where the data name none), a file
//     named without an extension read by its contents, an object without
//     an image (a report, a presentation state) left out and named
//     (Images.LeftOut, leftout.go), or, for a video or volume model,
//     each such object a clip of T of its frames (Fit.Clip, ClipView,
//     clips.go); a directory of single-frame slices one such object,
//     or one a series where its slices name several (Fit.Series,
//     series.go: the directory their unit); NIfTI volumes (.nii,
//     .nii.gz, internal/nifti) as such objects, their slices the frames
//     (nifti.go); holdout=F
//     splits a folder without a test split, users=REGEX names each
//     image's user, dicom-users each DICOM image's by its Patient ID —
//     a listing's too), npy (NumPy arrays: a .npz archive or a directory of
//     .npy files, LoadArrays) and csv (a listing of image files and their
//     labels, loadCSV; holdout=F too; multilabel or labels=COLUMNS, a
//     row's label a set of names, internal/labelset's label of the set:
//     MultiLabeled; a labels= column's -1, or a multi-hot array's, as
//     uncertain= says — zero, one, or ignore: a partial set, the label
//     left out of the loss and the figures —; path=, label=, user=, root=, ext=, where= for
//     listings as public datasets ship them: Spec);
//   - users (Users, UsersOf): the individual each sample belongs to, for
//     a user-level guarantee that protects all of a person's samples
//     together (a patient's scans). A CSV listing names them in an
//     optional header column (user, user_id, patient_id, subject,
//     participant, …: csvUserColumns), every row then naming its user;
//     a folder with the option users=REGEX (Spec.Users), a regular
//     expression whose first capture group (or whole match) names the
//     user from each image's path within its class directory —
//     users=^(person\d+)_ for person1_virus_6.jpeg, users=^([^/]+)/ for
//     CLASS/P017/img3.png: with the option a class directory's
//     sub-directories are read too, one level down, and every image must
//     match (the expression may not contain ':', the spec separator);
//     arrays in an optional integer array users. Users are numbered
//     densely in sorted order of their names (of their ids for arrays)
//     over the samples kept, one user across the classes; a CSV
//     listing's or a folder's holdout=F then holds out whole users, so
//     that no user is in both splits; and a change of grouping changes
//     the dataset's fingerprint;
//   - the in-memory dataset (Images): raw pixels in channel-major (C,H,W)
//     uint8, integer labels, class names, with every format error naming
//     the file and, for labels, the sample;
//   - preprocessing and batching (Preprocess, NewView, Dataset): bilinear
//     resize to the model's input size (Resize, ParseResize: stretched,
//     or the shorter side scaled and the centre cropped; antialiased
//     along an axis that shrinks), grayscale↔RGB conversion, scaling
//     to [0,1], mean/std normalisation (Norm, ParseNorm) and optional
//     augmentation (Augment, ParseAugment: random crop with zero padding,
//     torchvision's random resized crop in place of the resize,
//     horizontal flip) drawn from a caller-provided *rand.Rand, written
//     into a caller-provided buffer without allocating; a batch of large
//     samples (a 224×224 resize) is split over the cores, its
//     augmentation drawn first so that the bits do not depend on them;
//   - arrays (Arrays, TensorView): uint8 arrays of images become Images;
//     any other samples — normalised tensors, video clips (C,T,H,W) — are
//     fed as they are, of the model's shape or channels last, normalised
//     per channel and augmented over their last two axes (TensorPreprocess);
//   - fitting at load time (Fit, LoadFitted, Images.FitTo): a folder's
//     images larger than the model's input are resized as they are
//     decoded, as PIL resizes them, and only their input-sized windows
//     are kept (made gray first, as PIL's convert("L"), for a gray model),
//     or, for a random resized crop, the whole image at the centre crop's
//     shorter side (Fit.Whole); fitted images of more than half the memory
//     go to a file as they are decoded and are mapped (pixelfile.go);
//
// Sampling (which indices form a batch) and privacy accounting are not
// here: they belong to package dpengine, which hands Dataset.Fill the
// indices it sampled. Package data imports the standard library,
// golang.org/x/image's BMP, TIFF and WebP decoders, and internal helpers
// (the memory and disk available, a worker group, the Netpbm and DICOM decoders,
// label sets).
package data
