// Package hostile builds malformed and hostile inputs for tests: small ONNX
// models whose shapes ask for absurd amounts of memory, data files whose
// headers claim sizes they do not hold, and the structured mutations of
// models that FuzzPipeline applies. They are built in code, a few hundred
// bytes each, rather than committed as files.
package hostile
