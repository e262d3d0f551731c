// Package torchfile writes named float32 tensors in the two files PyTorch
// users load weights from: the zip archive torch.save writes for a state
// dict (".pt", read by torch.load, weights_only included) and safetensors
// (".safetensors", read by safetensors.torch.load_file).
//
// Both are written from the formats' own descriptions, without PyTorch:
// torch.save's archive is a zip of stored (uncompressed) records under one
// directory — "data.pkl", a pickle (protocol 2) of an OrderedDict whose
// values are torch._utils._rebuild_tensor_v2 calls over persistent storage
// ids ("storage", torch.FloatStorage, key, "cpu", numel); "data/<key>", each
// storage's bytes, little-endian; "version"; "byteorder" — and safetensors
// is an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, and the bytes. Each storage starts
// 64 bytes aligned in the archive, as torch.save aligns them, so that
// torch.load(mmap=True) can map them.
package torchfile
