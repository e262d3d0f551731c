// Runs an ONNX model in onnxruntime (the onnxruntime-node npm package) for
// dpfinetune's interop tests.
//
// usage: node run.js MODEL.onnx SPEC.json OUT.json
//   SPEC.json: {"inputs": {"name": {"shape": [...], "file": "x.f32"}}}
//              where each file holds little-endian float32 values, or,
//              with "dtype": "float16", little-endian float16 bits;
//   OUT.json:  {"outputs": {"name": {"shape": [...], "data": "<base64 float32 LE>"}}}
//              (float16 outputs widened to float32)
const fs = require('fs');
const path = require('path');

async function main() {
  const [model, specPath, outPath] = process.argv.slice(2);
  if (!outPath) {
    console.error('usage: node run.js MODEL.onnx SPEC.json OUT.json');
    process.exit(2);
  }
  const ort = require(process.env.DPFINETUNE_ORT_MODULE || 'onnxruntime-node');
  const spec = JSON.parse(fs.readFileSync(specPath, 'utf8'));
  const feeds = {};
  for (const [name, inp] of Object.entries(spec.inputs)) {
    const buf = fs.readFileSync(path.resolve(path.dirname(specPath), inp.file));
    if (inp.dtype === 'float16') {
      const bits = new Uint16Array(buf.byteLength / 2);
      for (let i = 0; i < bits.length; i++) bits[i] = buf.readUInt16LE(2 * i);
      feeds[name] = new ort.Tensor('float16', bits, inp.shape);
      continue;
    }
    const data = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    feeds[name] = new ort.Tensor('float32', Float32Array.from(data), inp.shape);
  }
  // Single-threaded and without graph optimizations beyond the basic ones,
  // so the numbers are those of the model as written.
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'basic',
  });
  const results = await session.run(feeds);
  const out = {};
  for (const [name, t] of Object.entries(results)) {
    const f = t.type === 'float16' && t.data instanceof Uint16Array ? Float32Array.from(t.data, halfToFloat) : Float32Array.from(t.data);
    out[name] = { shape: t.dims, data: Buffer.from(f.buffer).toString('base64') };
  }
  fs.writeFileSync(outPath, JSON.stringify({ outputs: out }));
}

// halfToFloat widens IEEE 754 binary16 bits (exact).
function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

main().catch((e) => { console.error(String(e && e.message || e)); process.exit(1); });
