// noise.cu: runtime.NoiseOps (device_noise.go), the keyed counter-based
// Gaussian generator of runtime/noise (its doc.go is the specification):
// AES-128 of counter blocks, a 256-layer float32 ziggurat on each element's
// word, and the slow path's auxiliary words from the element's own blocks.
// Element i depends on (key, step, i) alone, so each thread draws the four
// elements of one domain-0 block on its own and the result is the CPU's,
// bit for bit. The tables come from the host (noise.Tables and the S-box):
// nothing here is typed in.

// NoiseTables is the device copy of the ziggurat's tables K, W and F
// (noise.Tables) and the AES S-box.
struct NoiseTables {
  uint32_t k[256];
  float w[256];
  float f[256];
  uint8_t sbox[256];
};

// The block's shared copy of the tables, and what the block derives from
// them and the step's round keys for word-wise AES: te0, the T-table of
// SubBytes and MixColumns (aes_encrypt_words), and the round keys as the
// state's little-endian column words.
struct NoiseShared {
  NoiseTables t;
  uint32_t te0[256];
  uint32_t rkw[44];
};

__device__ __forceinline__ uint8_t xtime(uint8_t a) { return (uint8_t)((a << 1) ^ ((a >> 7) * 0x1b)); }

// aes_expand_key writes the AES-128 key schedule of key (FIPS-197 §5.2),
// the eleven round keys, to rk (one thread).
struct Key128 {
  uint8_t b[16];
};
extern "C" __global__ void aes_expand_key(Key128 key, const NoiseTables *tab, uint8_t *rk) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int i = 0; i < 16; i++) rk[i] = key.b[i];
  uint8_t rcon = 1;
  for (int i = 16; i < 176; i += 4) {
    uint8_t t[4] = {rk[i - 4], rk[i - 3], rk[i - 2], rk[i - 1]};
    if (i % 16 == 0) {
      uint8_t t0 = t[0];
      t[0] = tab->sbox[t[1]] ^ rcon;
      t[1] = tab->sbox[t[2]];
      t[2] = tab->sbox[t[3]];
      t[3] = tab->sbox[t0];
      rcon = xtime(rcon);
    }
    for (int k = 0; k < 4; k++) rk[i + k] = rk[i - 16 + k] ^ t[k];
  }
}

// rotl8 rotates a column word by n bits toward the high bytes: row r's
// byte to row r + n/8 (mod 4).
__device__ __forceinline__ uint32_t rotl8(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

// noise_shared_init fills sh from the host's tables tab and the round
// keys rk (aes_expand_key's bytes), the whole block taking part (the
// caller's __syncthreads follows): the tables copied, te0 and rkw derived.
__device__ void noise_shared_init(NoiseShared *sh, const NoiseTables *tab, const uint8_t *rk) {
  const uint8_t *src = (const uint8_t *)tab;
  uint8_t *dst = (uint8_t *)&sh->t;
  for (unsigned i = threadIdx.x; i < sizeof(NoiseTables); i += blockDim.x) dst[i] = src[i];
  // From global memory, not the shared copy, so that one barrier does.
  for (unsigned x = threadIdx.x; x < 256; x += blockDim.x) {
    uint32_t b = tab->sbox[x], b2 = xtime((uint8_t)b);
    sh->te0[x] = b2 | b << 8 | b << 16 | (b2 ^ b) << 24;
  }
  for (unsigned i = threadIdx.x; i < 44; i += blockDim.x)
    sh->rkw[i] = (uint32_t)rk[4 * i] | (uint32_t)rk[4 * i + 1] << 8 | (uint32_t)rk[4 * i + 2] << 16 | (uint32_t)rk[4 * i + 3] << 24;
}

// aes_encrypt_words encrypts the block whose state columns are the words
// c[0..3] (byte r of column j, state byte r + 4j, at bits 8r) in place
// (FIPS-197 §5.1), a round as four T-table columns: column j's new word is
// te0[a0] ^ rotl(te0[a1], 8) ^ rotl(te0[a2], 16) ^ rotl(te0[a3], 24) ^ its
// round key, a_r = row r of column j + r (ShiftRows), te0[a] the column
// (2, 1, 1, 3)·S(a) of MixColumns; the last round S alone.
__device__ void aes_encrypt_words(const NoiseShared *sh, uint32_t c[4]) {
  const uint32_t *te = sh->te0, *rk = sh->rkw;
  const uint8_t *sbox = sh->t.sbox;
  uint32_t s0 = c[0] ^ rk[0], s1 = c[1] ^ rk[1], s2 = c[2] ^ rk[2], s3 = c[3] ^ rk[3];
  for (int round = 1; round < 10; round++) {
    const uint32_t *k = rk + 4 * round;
    uint32_t t0 = te[s0 & 255] ^ rotl8(te[s1 >> 8 & 255], 8) ^ rotl8(te[s2 >> 16 & 255], 16) ^ rotl8(te[s3 >> 24], 24) ^ k[0];
    uint32_t t1 = te[s1 & 255] ^ rotl8(te[s2 >> 8 & 255], 8) ^ rotl8(te[s3 >> 16 & 255], 16) ^ rotl8(te[s0 >> 24], 24) ^ k[1];
    uint32_t t2 = te[s2 & 255] ^ rotl8(te[s3 >> 8 & 255], 8) ^ rotl8(te[s0 >> 16 & 255], 16) ^ rotl8(te[s1 >> 24], 24) ^ k[2];
    uint32_t t3 = te[s3 & 255] ^ rotl8(te[s0 >> 8 & 255], 8) ^ rotl8(te[s1 >> 16 & 255], 16) ^ rotl8(te[s2 >> 24], 24) ^ k[3];
    s0 = t0, s1 = t1, s2 = t2, s3 = t3;
  }
  const uint32_t *k = rk + 40;
  c[0] = ((uint32_t)sbox[s0 & 255] | (uint32_t)sbox[s1 >> 8 & 255] << 8 | (uint32_t)sbox[s2 >> 16 & 255] << 16 | (uint32_t)sbox[s3 >> 24] << 24) ^ k[0];
  c[1] = ((uint32_t)sbox[s1 & 255] | (uint32_t)sbox[s2 >> 8 & 255] << 8 | (uint32_t)sbox[s3 >> 16 & 255] << 16 | (uint32_t)sbox[s0 >> 24] << 24) ^ k[1];
  c[2] = ((uint32_t)sbox[s2 & 255] | (uint32_t)sbox[s3 >> 8 & 255] << 8 | (uint32_t)sbox[s0 >> 16 & 255] << 16 | (uint32_t)sbox[s1 >> 24] << 24) ^ k[2];
  c[3] = ((uint32_t)sbox[s3 & 255] | (uint32_t)sbox[s0 >> 8 & 255] << 8 | (uint32_t)sbox[s1 >> 16 & 255] << 16 | (uint32_t)sbox[s2 >> 24] << 24) ^ k[3];
}

// aes_encrypt encrypts the block s in place, its bytes in FIPS-197's
// order (byte r + 4c is row r, column c).
__device__ void aes_encrypt(const NoiseShared *sh, uint8_t s[16]) {
  uint32_t c[4];
  for (int j = 0; j < 4; j++) c[j] = (uint32_t)s[4 * j] | (uint32_t)s[4 * j + 1] << 8 | (uint32_t)s[4 * j + 2] << 16 | (uint32_t)s[4 * j + 3] << 24;
  aes_encrypt_words(sh, c);
  for (int j = 0; j < 4; j++)
    for (int r = 0; r < 4; r++) s[4 * j + r] = (uint8_t)(c[j] >> 8 * r);
}

// counter_block writes C(step, domain, index): step big-endian in bytes
// 0–7, the domain in bytes 8–9, the 48-bit index in bytes 10–15.
__device__ void counter_block(uint8_t b[16], unsigned long long step, unsigned domain, unsigned long long index) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(step >> (56 - 8 * i));
  b[8] = (uint8_t)(domain >> 8);
  b[9] = (uint8_t)domain;
  for (int i = 0; i < 6; i++) b[10 + i] = (uint8_t)(index >> (40 - 8 * i));
}

// word_le is the little-endian word at b.
__device__ __forceinline__ uint32_t word_le(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

// Aux reads an element's auxiliary words: words 0–3 of E(C(step, d, i))
// for d = 1, 2, …, 65535, then zeros.
struct Aux {
  const NoiseShared *sh;
  unsigned long long step, index;
  unsigned domain;
  int pos;
  uint8_t b[16];
};

__device__ uint32_t aux_next(Aux *a) {
  if (a->pos == 16) {
    a->pos = 0;
    if (a->domain == 65535) {
      for (int i = 0; i < 16; i++) a->b[i] = 0;
    } else {
      a->domain++;
      counter_block(a->b, a->step, a->domain, a->index);
      aes_encrypt(a->sh, a->b);
    }
  }
  uint32_t w = word_le(a->b + a->pos);
  a->pos += 4;
  return w;
}

// aux_uniform is ((hi << 32 | lo) >> 11)·2⁻⁵³ from the next two words.
__device__ double aux_uniform(Aux *a) {
  unsigned long long hi = aux_next(a);
  unsigned long long lo = aux_next(a);
  return (double)((hi << 32 | lo) >> 11) * (1.0 / 9007199254740992.0);
}

// noise_expf is runtime/noise's expf (mathf.go), line by line: Cephes
// expf with every product rounded to float.
__device__ float noise_expf(float x) {
  if (x != x) return x;
  if (x > 88.72283f) return __uint_as_float(0x7f800000u);
  if (x < -87.33654f) return 0;
  float fn = x * 1.44269504088896341f + 0.5f;
  int n = (int)fn;
  if (fn < 0 && (float)n != fn) n--;
  float r = (x - (float)n * 0.693359375f) - (float)n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = (p * r) * r + r + 1.0f;
  if (n > 127) return (y * 2.0f) * __uint_as_float((unsigned)(n - 1 + 127) << 23);
  return y * __uint_as_float((unsigned)(n + 127) << 23);
}

// noise_ln is runtime/noise's ln (mathf.go), line by line: x = m·2^e with
// m ∈ [√½, √2), 2·atanh((m−1)/(m+1)) to s²³, e·ln 2 in two parts.
__device__ double noise_ln(double x) {
  if (x == 0) return -__longlong_as_double(0x7ff0000000000000LL);
  if (!(x > 0)) return __longlong_as_double(0x7ff8000000000000LL);
  int e;
  double m = frexp(x, &e);
  if (m < 0.70710678118654752440084436210484903928483593768847) {
    m *= 2;
    e--;
  }
  double s = (m - 1) / (m + 1);
  double s2 = s * s;
  double p = 1.0 / 23;
  for (int k = 21; k >= 1; k -= 2) p = p * s2 + 1.0 / k;
  double fe = e;
  return fe * 6.93147180369123816490e-01 + ((2 * s) * p + fe * 1.90821492927058770002e-10);
}

// zig_slow finishes a draw outside its layer's rectangle (doc.go's slow):
// the tail beyond r for layer 0, the wedge test through expf for the
// others, a fresh layer and magnitude from the next word on rejection.
__device__ float zig_slow(Aux *a, uint32_t layer, uint32_t m) {
  const NoiseTables *t = &a->sh->t;
  for (;;) {
    if (layer == 0) {
      for (;;) {
        double x = -noise_ln(1 - aux_uniform(a)) * 0.27366123732975828;
        double y = -noise_ln(1 - aux_uniform(a));
        if (2 * y >= x * x) return (float)(3.6541528853610088 + x);
      }
    }
    float x = (float)m * t->w[layer];
    float v = (float)(aux_next(a) >> 8) * (1.0f / 16777216.0f);
    float y = t->f[layer] + v * (t->f[layer - 1] - t->f[layer]);
    if (y < noise_expf(-0.5f * x * x)) return x;
    uint32_t w = aux_next(a);
    layer = w & 255;
    m = w >> 9;
    if (m < t->k[layer]) return (float)m * t->w[layer];
  }
}

// add_gaussian_noise sets x[k] ← (x[k] + std·z_{offset+k})·post for
// k < n: thread q draws the elements of domain-0 block offset/4 + q, each
// from word (i mod 4) of E(C(step, 0, ⌊i/4⌋)).
extern "C" __global__ void add_gaussian_noise(float *x, long long n, unsigned long long offset, unsigned long long step,
                                              float sd, float post, const NoiseTables *tab, const uint8_t *rk) {
  __shared__ NoiseShared sh;
  noise_shared_init(&sh, tab, rk);
  __syncthreads();
  unsigned long long first = offset / 4, last = (offset + (unsigned long long)n - 1) / 4;
  long long blocks = (long long)(last - first + 1);
  for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < blocks; q += (long long)gridDim.x * blockDim.x) {
    unsigned long long bi = first + (unsigned long long)q;
    uint8_t b[16];
    counter_block(b, step, 0, bi);
    uint32_t c[4];
    for (int j = 0; j < 4; j++) c[j] = word_le(b + 4 * j);
    aes_encrypt_words(&sh, c);
    for (int w = 0; w < 4; w++) {
      unsigned long long i = 4 * bi + (unsigned long long)w;
      if (i < offset || i >= offset + (unsigned long long)n) continue;
      uint32_t u = c[w];
      uint32_t layer = u & 255, m = u >> 9;
      float a;
      if (m < sh.t.k[layer]) {
        a = (float)m * sh.t.w[layer];
      } else {
        Aux aux;
        aux.sh = &sh;
        aux.step = step;
        aux.index = i;
        aux.domain = 1;
        aux.pos = 0;
        counter_block(aux.b, step, 1, i);
        aes_encrypt(&sh, aux.b);
        a = zig_slow(&aux, layer, m);
      }
      float z = __uint_as_float(__float_as_uint(a) ^ ((u & 256u) << 23));
      long long k = (long long)(i - offset);
      x[k] = (x[k] + sd * z) * post;
    }
  }
}
