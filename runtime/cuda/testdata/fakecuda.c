// fakecuda.c: a stand-in for libcuda.so.1, libnvrtc.so and libcublas.so
// in one library,
// for TestRealDriverOnFake: the entry points the real driver (nvidia.go)
// calls, with their C signatures, over host memory. "Compiling" keeps the
// source as the cubin; loading the cubin compiles it with g++ against the
// emulation header (FAKECUDA_HEADER) and launches through its launchers.
// It checks what a GPU would: a current context on the calling thread,
// the options NVRTC gets, the launch's argument array.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
enum {
  OK = 0,
  INVALID_VALUE = 1,
  NOT_INITIALIZED = 3,
  INVALID_DEVICE = 101,
  INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201,
  NOT_FOUND = 500,
  LAUNCH_FAILED = 719,
};

static int initialized;
static void *const the_ctx = (void *)0xc0ffee;
static __thread void *current;

static CUresult need_ctx(void) {
  if (!initialized) return NOT_INITIALIZED;
  return current == the_ctx ? OK : INVALID_CONTEXT;
}

CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  initialized = 1;
  return OK;
}
CUresult cuDriverGetVersion(int *v) {
  *v = 12040;
  return OK;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!initialized) return NOT_INITIALIZED;
  if (ordinal != 0) return INVALID_DEVICE;
  *dev = 0;
  return OK;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  if (dev != 0) return INVALID_DEVICE;
  snprintf(name, (size_t)len, "Fake GPU");
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (dev != 0) return INVALID_DEVICE;
  switch (attr) {
  case 75: *v = 8; return OK; // compute capability
  case 76: *v = 6; return OK;
  case 16: *v = 3; return OK; // multiprocessors
  }
  return INVALID_VALUE;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  if (dev != 0) return INVALID_DEVICE;
  *bytes = (size_t)3 << 30;
  return OK;
}
static int retained;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (dev != 0) return INVALID_DEVICE;
  retained++;
  *ctx = the_ctx;
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (dev != 0 || retained == 0) return INVALID_CONTEXT;
  retained--;
  return OK;
}
CUresult cuCtxSetCurrent(void *ctx) {
  if (ctx != the_ctx) return INVALID_CONTEXT;
  current = ctx;
  return OK;
}
CUresult cuCtxSynchronize(void) { return need_ctx(); }

// Allocations are tracked so that frees and copies are checked.
#define MAXALLOC 4096
static struct {
  unsigned long long p;
  size_t n;
} allocs[MAXALLOC];

static int find(unsigned long long p, size_t n) {
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].p && p >= allocs[i].p && p + n <= allocs[i].p + allocs[i].n) return i;
  return -1;
}
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) {
  CUresult r = need_ctx();
  if (r) return r;
  if (n == 0) return INVALID_VALUE;
  for (int i = 0; i < MAXALLOC; i++)
    if (!allocs[i].p) {
      void *m = aligned_alloc(256, (n + 255) / 256 * 256);
      memset(m, 0x5a, n); // not zero: cuMemAlloc does not clear
      allocs[i].p = (unsigned long long)(uintptr_t)m;
      allocs[i].n = n;
      *p = allocs[i].p;
      return OK;
    }
  return 2; // CUDA_ERROR_OUT_OF_MEMORY
}
CUresult cuMemFree_v2(unsigned long long p) {
  CUresult r = need_ctx();
  if (r) return r;
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].p == p) {
      free((void *)(uintptr_t)p);
      allocs[i].p = 0;
      return OK;
    }
  return INVALID_VALUE;
}
CUresult cuMemsetD8_v2(unsigned long long p, unsigned char v, size_t n) {
  CUresult r = need_ctx();
  if (r) return r;
  if (find(p, n) < 0) return INVALID_VALUE;
  memset((void *)(uintptr_t)p, v, n);
  return OK;
}
CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) {
  CUresult r = need_ctx();
  if (r) return r;
  if (find(dst, n) < 0 || find((unsigned long long)(uintptr_t)src, 1) >= 0) return INVALID_VALUE;
  memcpy((void *)(uintptr_t)dst, src, n);
  return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) {
  CUresult r = need_ctx();
  if (r) return r;
  if (find(src, n) < 0 || find((unsigned long long)(uintptr_t)dst, 1) >= 0) return INVALID_VALUE;
  memcpy(dst, (void *)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemcpyDtoD_v2(unsigned long long dst, unsigned long long src, size_t n) {
  CUresult r = need_ctx();
  if (r) return r;
  if (find(dst, n) < 0 || find(src, n) < 0) return INVALID_VALUE;
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return OK;
}

// The "cubin" is "FAKECUBIN\n" and the source NVRTC was given.
static const char magic[] = "FAKECUBIN\n";

CUresult cuModuleLoadData(void **mod, const void *image) {
  CUresult r = need_ctx();
  if (r) return r;
  const char *src = (const char *)image;
  if (strncmp(src, magic, strlen(magic)) != 0) return INVALID_IMAGE;
  src += strlen(magic);
  // Compiled libraries are kept in FAKECUDA_CACHE by the source's hash.
  uint64_t hash = 1469598103934665603ull; // FNV-1a
  for (const char *p = src; *p; p++) hash = (hash ^ (unsigned char)*p) * 1099511628211ull;
  char cached[512];
  snprintf(cached, sizeof cached, "%s/%016llx.so", getenv("FAKECUDA_CACHE"), (unsigned long long)hash);
  void *h = dlopen(cached, RTLD_NOW | RTLD_LOCAL);
  if (h) {
    *mod = h;
    return OK;
  }
  char dir[] = "/tmp/fakecuda-XXXXXX";
  if (!mkdtemp(dir)) return INVALID_IMAGE;
  char in[256], out[256], cmd[1024];
  snprintf(in, sizeof in, "%s/m.cu", dir);
  snprintf(out, sizeof out, "%s/m.so", dir);
  FILE *f = fopen(in, "w");
  if (!f) return INVALID_IMAGE;
  fputs(src, f);
  fputs("\n", f);
  // A launcher per extern "C" __global__ void name(.
  for (const char *p = src; (p = strstr(p, "__global__ void ")) != NULL;) {
    p += strlen("__global__ void ");
    const char *e = p;
    while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') || *e == '_') e++;
    fprintf(f, "EMU_EXPORT(%.*s)\n", (int)(e - p), p);
    p = e;
  }
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "g++ -x c++ -std=c++17 -O1 -shared -fPIC -fvisibility=hidden -pthread -ffp-contract=off -w -include '%s' -o %s %s",
           getenv("FAKECUDA_HEADER"), out, in);
  int rc = system(cmd);
  if (rc == 0) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d", cached, (int)getpid());
    snprintf(cmd, sizeof cmd, "cp %s %s && mv %s %s", out, tmp, tmp, cached);
    rc = system(cmd);
  }
  h = rc == 0 ? dlopen(cached, RTLD_NOW | RTLD_LOCAL) : NULL;
  unlink(in);
  unlink(out);
  rmdir(dir);
  if (!h) return INVALID_IMAGE;
  *mod = h;
  return OK;
}
CUresult cuModuleUnload(void *mod) {
  CUresult r = need_ctx();
  return r ? r : (mod ? OK : INVALID_VALUE);
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  CUresult r = need_ctx();
  if (r) return r;
  char sym[256];
  snprintf(sym, sizeof sym, "emu_launch_%s", name);
  *fn = dlsym(mod, sym);
  return *fn ? OK : NOT_FOUND;
}
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  CUresult r = need_ctx();
  if (r) return r;
  if (stream != NULL || extra != NULL || params == NULL) return INVALID_VALUE;
  unsigned cfg[7] = {gx, gy, gz, bx, by, bz, shared};
  int rc = ((int (*)(const unsigned *, void **))fn)(cfg, params);
  return rc == 0 ? OK : rc == 1 ? INVALID_VALUE : LAUNCH_FAILED;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
  case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
  case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
  case INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
  case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
  default: *s = "CUDA_ERROR_UNKNOWN";
  }
  return OK;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = e == INVALID_CONTEXT ? "invalid device context" : "fake error";
  return OK;
}

// --- NVRTC ---

typedef struct {
  char *src, *log;
  int compiled;
} prog;

int nvrtcVersion(int *major, int *minor) {
  *major = 12;
  *minor = 4;
  return 0;
}
int nvrtcCreateProgram(prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn) {
  (void)name, (void)h, (void)hn;
  if (nh != 0) return 4; // NVRTC_ERROR_INVALID_INPUT
  *p = calloc(1, sizeof(prog));
  (*p)->src = strdup(src);
  (*p)->log = strdup("");
  return 0;
}
// The architectures NVRTC knows: FAKECUDA_ARCHS, a comma-separated list
// (default 80,86, which has the fake device's 86).
static int archs(int *out) {
  const char *e = getenv("FAKECUDA_ARCHS");
  if (!e || !*e) e = "80,86";
  int n = 0;
  for (const char *p = e; *p;) {
    int a = (int)strtol(p, (char **)&p, 10);
    if (out) out[n] = a;
    n++;
    if (*p == ',') p++;
  }
  return n;
}
int nvrtcGetNumSupportedArchs(int *n) {
  *n = archs(NULL);
  return 0;
}
int nvrtcGetSupportedArchs(int *a) {
  archs(a);
  return 0;
}

int nvrtcCompileProgram(prog *p, int n, const char *const *opts) {
  int fmad = 0, arch = 0, list[64], na = archs(list);
  for (int i = 0; i < n; i++) {
    if (strcmp(opts[i], "--fmad=false") == 0) fmad = 1;
    for (int k = 0; k < na; k++) {
      char sm[64], compute[64];
      snprintf(sm, sizeof sm, "--gpu-architecture=sm_%d", list[k]);
      snprintf(compute, sizeof compute, "--gpu-architecture=compute_%d", list[k]);
      if ((list[k] == 86 && strcmp(opts[i], sm) == 0) || strcmp(opts[i], compute) == 0) arch = 1;
    }
  }
  free(p->log);
  if (!fmad || !arch) {
    p->log = strdup("fake nvrtc: want --fmad=false and sm_86 or compute_XY of a known XY");
    return 5; // NVRTC_ERROR_INVALID_OPTION
  }
  if (strstr(p->src, "undefined_name")) {
    p->log = strdup("broken.cu(2): error: identifier \"undefined_name\" is undefined\n");
    return 6; // NVRTC_ERROR_COMPILATION
  }
  p->log = strdup("");
  p->compiled = 1;
  return 0;
}
int nvrtcGetProgramLogSize(prog *p, size_t *n) {
  *n = strlen(p->log) + 1;
  return 0;
}
int nvrtcGetProgramLog(prog *p, char *log) {
  strcpy(log, p->log);
  return 0;
}
// The cubin and the PTX are the same image. The entry points share static
// helpers, not each other: a call between exported functions could bind
// to another library's of the same name.
static int image_size(prog *p, size_t *n) {
  if (!p->compiled) return 9; // NVRTC_ERROR_INVALID_PROGRAM
  *n = strlen(magic) + strlen(p->src) + 1;
  return 0;
}
static int image(prog *p, char *out) {
  strcpy(out, magic);
  strcat(out, p->src);
  return 0;
}
int nvrtcGetCUBINSize(prog *p, size_t *n) { return image_size(p, n); }
int nvrtcGetCUBIN(prog *p, char *out) { return image(p, out); }
int nvrtcGetPTXSize(prog *p, size_t *n) { return image_size(p, n); }
int nvrtcGetPTX(prog *p, char *out) { return image(p, out); }
int nvrtcDestroyProgram(prog **p) {
  free((*p)->src);
  free((*p)->log);
  free(*p);
  *p = NULL;
  return 0;
}
const char *nvrtcGetErrorString(int r) {
  switch (r) {
  case 5: return "NVRTC_ERROR_INVALID_OPTION";
  case 6: return "NVRTC_ERROR_COMPILATION";
  }
  return "NVRTC_ERROR_FAKE";
}

// --- cuBLAS ---

// The handle is a token; the GEMMs are plain column-major loops over the
// "device" memory, checked as cuBLAS checks its arguments.
static void *const the_handle = (void *)0xb1a5;
static int handles;

int cublasCreate_v2(void **h) {
  if (need_ctx() != OK) return 1; // CUBLAS_STATUS_NOT_INITIALIZED
  handles++;
  *h = the_handle;
  return 0;
}
int cublasDestroy_v2(void *h) {
  if (h != the_handle || handles == 0) return 1;
  handles--;
  return 0;
}

// math_mode is the handle's cublasMath_t: 3 (CUBLAS_TF32_TENSOR_OP_MATH)
// rounds the products' operands to TF32, to nearest as the emulation does.
static int math_mode;

int cublasSetMathMode(void *h, int mode) {
  if (h != the_handle || handles == 0) return 1;
  if (mode != 0 && mode != 1 && mode != 2 && mode != 3 && mode != 16) return 7; // INVALID_VALUE
  math_mode = mode;
  return 0;
}

static float tf32(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u += 0xfffu + ((u >> 13) & 1u);
  u &= ~0x1fffu;
  memcpy(&x, &u, 4);
  return x;
}

// gemm1 is one column-major product C = α·op(A)·op(B) + β·C, C m×n (β = 0:
// C not read), summed in double.
static int gemm1(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
  size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  if (find((unsigned long long)(uintptr_t)A, 4 * ((ac - 1) * lda + ar)) < 0 ||
      find((unsigned long long)(uintptr_t)B, 4 * ((bc - 1) * ldb + br)) < 0 ||
      find((unsigned long long)(uintptr_t)C, 4 * (((size_t)n - 1) * ldc + m)) < 0)
    return 14; // CUBLAS_STATUS_INTERNAL_ERROR: the GPU faulted
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) {
        float a = ta ? A[l + (size_t)i * lda] : A[i + (size_t)l * lda];
        float b = tb ? B[j + (size_t)l * ldb] : B[l + (size_t)j * ldb];
        if (math_mode == 3) a = tf32(a), b = tf32(b);
        s += (double)a * b;
      }
      float *c = &C[i + (size_t)j * ldc];
      *c = beta == 0 ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *c);
    }
  return 0;
}

static int check_gemm(void *h, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc) {
  if (h != the_handle || handles == 0 || need_ctx() != OK) return 1;
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1) || m < 0 || n < 0 || k < 0) return 7; // INVALID_VALUE
  int ar = ta ? k : m, br = tb ? n : k;
  if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) return 7;
  return 0;
}

int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                   const float *B, int ldb, const float *beta, float *C, int ldc) {
  int r = check_gemm(h, ta, tb, m, n, k, lda, ldb, ldc);
  if (r || m == 0 || n == 0) return r;
  return gemm1(ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

int cublasSgemmBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *const A[],
                       int lda, const float *const B[], int ldb, const float *beta, float *const C[], int ldc,
                       int batch) {
  int r = check_gemm(h, ta, tb, m, n, k, lda, ldb, ldc);
  if (r || batch < 0) return r ? r : 7;
  // The arrays of pointers are device memory.
  size_t bytes = sizeof(void *) * (size_t)batch;
  if (batch > 0 && (find((unsigned long long)(uintptr_t)A, bytes) < 0 || find((unsigned long long)(uintptr_t)B, bytes) < 0 ||
                    find((unsigned long long)(uintptr_t)C, bytes) < 0))
    return 14;
  for (int i = 0; i < batch && m > 0 && n > 0; i++)
    if ((r = gemm1(ta, tb, m, n, k, *alpha, A[i], lda, B[i], ldb, *beta, C[i], ldc)) != 0) return r;
  return 0;
}
