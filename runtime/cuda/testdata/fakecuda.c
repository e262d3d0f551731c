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
// FAKECUDA_DEVICES sets the GPUs visible (1 if unset); device d's handle
// is 100 + d, so that a driver passing an ordinal for a handle is caught.
static int devices(void) {
  const char *e = getenv("FAKECUDA_DEVICES");
  return e ? atoi(e) : 1;
}
static int bad_dev(int dev) { return dev < 100 || dev >= 100 + devices(); }
CUresult cuDeviceGetCount(int *n) {
  if (!initialized) return NOT_INITIALIZED;
  *n = devices();
  return OK;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!initialized) return NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= devices()) return INVALID_DEVICE;
  *dev = 100 + ordinal;
  return OK;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  if (bad_dev(dev)) return INVALID_DEVICE;
  if (dev == 100)
    snprintf(name, (size_t)len, "Fake GPU");
  else
    snprintf(name, (size_t)len, "Fake GPU %d", dev - 100);
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (bad_dev(dev)) return INVALID_DEVICE;
  switch (attr) {
  case 75: *v = 8; return OK; // compute capability
  case 76: *v = 6; return OK;
  case 16: *v = 3; return OK; // multiprocessors
  }
  return INVALID_VALUE;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  if (bad_dev(dev)) return INVALID_DEVICE;
  *bytes = (size_t)3 << 30;
  return OK;
}
static int retained;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (bad_dev(dev)) return INVALID_DEVICE;
  retained++;
  *ctx = the_ctx;
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (bad_dev(dev) || retained == 0) return INVALID_CONTEXT;
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

// --- cuDNN ---

// The legacy convolution API (cudnn_cnn.h) over the "device" memory: NCHW
// float tensors and filters with packed strides, cross-correlation with
// symmetric padding, strides, dilations and groups, computed in double.
// It checks what cuDNN would — a current context, the descriptors'
// consistency, the mode (cross-correlation, 1), the workspace an algorithm
// asks for — and offers two algorithms per product, in this order: 1,
// which needs no workspace but is not deterministic (the driver must pass
// it over), and 0, deterministic, which needs a workspace of 1 MiB; with
// the math type CUDNN_TENSOR_OP_MATH (1) it rounds the operands to TF32.
enum { DNN_OK = 0, DNN_NOT_INITIALIZED = 1, DNN_BAD_PARAM = 3, DNN_EXECUTION_FAILED = 8, DNN_NOT_SUPPORTED = 9 };
static void *const the_dnn = (void *)0xd00d;
static int dnn_handles;

typedef struct {
  int nb, dims[5], strides[5];
} dnn_tensor;
typedef struct {
  int nb, dims[5];
} dnn_filter;
typedef struct {
  int n, pad[3], stride[3], dil[3], groups, math;
} dnn_conv;
typedef struct {
  int algo, status;
  float time;
  size_t memory;
  int determinism, math_type, reserved[3];
} dnn_perf;

const char *cudnnGetErrorString(int s) {
  switch (s) {
  case DNN_OK: return "CUDNN_STATUS_SUCCESS";
  case DNN_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
  case DNN_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
  case DNN_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  case DNN_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}
size_t cudnnGetVersion(void) { return 90100; }
int cudnnCreate(void **h) {
  if (need_ctx() != OK) return DNN_NOT_INITIALIZED;
  dnn_handles++;
  *h = the_dnn;
  return DNN_OK;
}
int cudnnDestroy(void *h) {
  if (h != the_dnn || dnn_handles == 0) return DNN_BAD_PARAM;
  dnn_handles--;
  return DNN_OK;
}
int cudnnCreateTensorDescriptor(dnn_tensor **d) { return (*d = calloc(1, sizeof **d)) ? DNN_OK : DNN_EXECUTION_FAILED; }
int cudnnDestroyTensorDescriptor(dnn_tensor *d) { free(d); return DNN_OK; }
int cudnnSetTensorNdDescriptor(dnn_tensor *d, int dtype, int nb, const int *dims, const int *strides) {
  if (dtype != 0 || nb < 4 || nb > 5) return DNN_BAD_PARAM;
  int acc = 1;
  for (int i = nb - 1; i >= 0; i--) {
    if (dims[i] <= 0 || strides[i] != acc) return DNN_BAD_PARAM; // packed NC… only, here
    acc *= dims[i];
  }
  d->nb = nb;
  memcpy(d->dims, dims, sizeof(int) * nb);
  memcpy(d->strides, strides, sizeof(int) * nb);
  return DNN_OK;
}
int cudnnCreateFilterDescriptor(dnn_filter **d) { return (*d = calloc(1, sizeof **d)) ? DNN_OK : DNN_EXECUTION_FAILED; }
int cudnnDestroyFilterDescriptor(dnn_filter *d) { free(d); return DNN_OK; }
int cudnnSetFilterNdDescriptor(dnn_filter *d, int dtype, int format, int nb, const int *dims) {
  if (dtype != 0 || format != 0 || nb < 4 || nb > 5) return DNN_BAD_PARAM;
  for (int i = 0; i < nb; i++)
    if (dims[i] <= 0) return DNN_BAD_PARAM;
  d->nb = nb;
  memcpy(d->dims, dims, sizeof(int) * nb);
  return DNN_OK;
}
int cudnnCreateConvolutionDescriptor(dnn_conv **d) {
  if (!(*d = calloc(1, sizeof **d))) return DNN_EXECUTION_FAILED;
  (*d)->groups = 1;
  return DNN_OK;
}
int cudnnDestroyConvolutionDescriptor(dnn_conv *d) { free(d); return DNN_OK; }
int cudnnSetConvolutionNdDescriptor(dnn_conv *d, int n, const int *pad, const int *stride, const int *dil, int mode, int ctype) {
  if (n < 2 || n > 3 || mode != 1 || ctype != 0) return DNN_BAD_PARAM; // cross-correlation, float compute
  for (int i = 0; i < n; i++)
    if (pad[i] < 0 || stride[i] <= 0 || dil[i] <= 0) return DNN_BAD_PARAM;
  d->n = n;
  memcpy(d->pad, pad, sizeof(int) * n);
  memcpy(d->stride, stride, sizeof(int) * n);
  memcpy(d->dil, dil, sizeof(int) * n);
  return DNN_OK;
}
int cudnnSetConvolutionGroupCount(dnn_conv *d, int g) {
  if (g <= 0) return DNN_BAD_PARAM;
  d->groups = g;
  return DNN_OK;
}
int cudnnSetConvolutionMathType(dnn_conv *d, int m) {
  if (m < 0 || m > 3) return DNN_BAD_PARAM;
  d->math = m;
  return DNN_OK;
}

// dnn_geom is a convolution's sizes, lifted to three spatial axes, after
// checking that x, w, y and the convolution agree (y's sizes are the ones
// the convolution gives x).
typedef struct {
  int n, c, m, g, in[3], k[3], out[3], pad[3], st[3], dil[3];
} dnn_geom;
static int dnn_check(const dnn_tensor *x, const dnn_filter *w, const dnn_conv *cv, const dnn_tensor *y, dnn_geom *o) {
  int sp = x->nb - 2;
  if (y->nb != x->nb || w->nb != x->nb || cv->n != sp) return DNN_BAD_PARAM;
  o->n = x->dims[0], o->c = x->dims[1], o->m = y->dims[1], o->g = cv->groups;
  if (y->dims[0] != o->n || w->dims[0] != o->m || o->c % o->g || o->m % o->g || w->dims[1] != o->c / o->g) return DNN_BAD_PARAM;
  for (int a = 0; a < 3; a++) {
    int s = a - (3 - sp);
    o->in[a] = s < 0 ? 1 : x->dims[2 + s];
    o->k[a] = s < 0 ? 1 : w->dims[2 + s];
    o->out[a] = s < 0 ? 1 : y->dims[2 + s];
    o->pad[a] = s < 0 ? 0 : cv->pad[s];
    o->st[a] = s < 0 ? 1 : cv->stride[s];
    o->dil[a] = s < 0 ? 1 : cv->dil[s];
    if ((o->in[a] + 2 * o->pad[a] - o->dil[a] * (o->k[a] - 1) - 1) / o->st[a] + 1 != o->out[a]) return DNN_BAD_PARAM;
  }
  return DNN_OK;
}
static size_t dnn_len(const dnn_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->nb; i++) n *= (size_t)t->dims[i];
  return n;
}
static size_t dnn_flen(const dnn_filter *t) {
  size_t n = 1;
  for (int i = 0; i < t->nb; i++) n *= (size_t)t->dims[i];
  return n;
}

// dnn_run computes one product over every (n, m, output position, tap):
// kind 0 y = α·Σ x·w + β·y, 1 x = α·Σ y·w + β·x, 2 w = α·Σ x·y + β·w, in
// double into a scratch, then scaled and rounded.
static int dnn_run(int kind, const dnn_geom *o, int math, float alpha, float beta, float *x, float *w, float *y) {
  int cg = o->c / o->g, mg = o->m / o->g;
  size_t inS = (size_t)o->in[0] * o->in[1] * o->in[2], outS = (size_t)o->out[0] * o->out[1] * o->out[2];
  size_t kS = (size_t)o->k[0] * o->k[1] * o->k[2];
  size_t nx = (size_t)o->n * o->c * inS, ny = (size_t)o->n * o->m * outS, nw = (size_t)o->m * cg * kS;
  size_t nacc = kind == 0 ? ny : kind == 1 ? nx : nw;
  double *acc = calloc(nacc ? nacc : 1, sizeof(double));
  if (!acc) return DNN_EXECUTION_FAILED;
#define RD(v) (math == 1 ? tf32(v) : (v))
  for (int n = 0; n < o->n; n++)
    for (int m = 0; m < o->m; m++)
      for (int od = 0; od < o->out[0]; od++)
        for (int oh = 0; oh < o->out[1]; oh++)
          for (int ow = 0; ow < o->out[2]; ow++) {
            size_t yi = (((size_t)n * o->m + m) * o->out[0] + od) * o->out[1] * o->out[2] + (size_t)oh * o->out[2] + ow;
            for (int c = 0; c < cg; c++)
              for (int kd = 0; kd < o->k[0]; kd++)
                for (int kh = 0; kh < o->k[1]; kh++)
                  for (int kw = 0; kw < o->k[2]; kw++) {
                    int id = od * o->st[0] - o->pad[0] + kd * o->dil[0];
                    int ih = oh * o->st[1] - o->pad[1] + kh * o->dil[1];
                    int iw = ow * o->st[2] - o->pad[2] + kw * o->dil[2];
                    if (id < 0 || id >= o->in[0] || ih < 0 || ih >= o->in[1] || iw < 0 || iw >= o->in[2]) continue;
                    int ch = m / mg * cg + c;
                    size_t xi = (((size_t)n * o->c + ch) * o->in[0] + id) * o->in[1] * o->in[2] + (size_t)ih * o->in[2] + iw;
                    size_t wi = (((size_t)m * cg + c) * o->k[0] + kd) * o->k[1] * o->k[2] + (size_t)kh * o->k[2] + kw;
                    if (kind == 0) acc[yi] += (double)RD(x[xi]) * RD(w[wi]);
                    if (kind == 1) acc[xi] += (double)RD(y[yi]) * RD(w[wi]);
                    if (kind == 2) acc[wi] += (double)RD(x[xi]) * RD(y[yi]);
                  }
          }
#undef RD
  float *out = kind == 0 ? y : kind == 1 ? x : w;
  for (size_t i = 0; i < nacc; i++) out[i] = beta == 0 ? (float)(alpha * acc[i]) : (float)(alpha * acc[i] + (double)beta * out[i]);
  free(acc);
  return DNN_OK;
}

// dnn_algos writes the two algorithms' perf entries, the math type the
// descriptor asks for.
static int dnn_algos(void *h, const dnn_conv *cv, int want, int *got, dnn_perf *p) {
  if (h != the_dnn || dnn_handles == 0 || need_ctx() != OK) return DNN_NOT_INITIALIZED;
  if (want < 1) return DNN_BAD_PARAM;
  int n = want < 2 ? want : 2;
  for (int i = 0; i < n; i++) {
    memset(&p[i], 0, sizeof p[i]);
    p[i].algo = 1 - i;
    p[i].memory = p[i].algo == 0 ? (size_t)1 << 20 : 0;
    p[i].determinism = p[i].algo == 0; // CUDNN_DETERMINISTIC
    p[i].math_type = cv->math;
  }
  *got = n;
  return DNN_OK;
}
static int dnn_ws(int algo, size_t *n) {
  if (algo != 0 && algo != 1) return DNN_BAD_PARAM;
  *n = algo == 0 ? (size_t)1 << 20 : 0;
  return DNN_OK;
}
// dnn_go checks a product's call and runs it: the handle, the context,
// the operands in device memory, the workspace the algorithm needs.
static int dnn_go(int kind, void *h, const float *alpha, const dnn_tensor *xd, float *x, const dnn_filter *wd, float *w,
                  const dnn_conv *cv, int algo, void *ws, size_t wsn, const float *beta, const dnn_tensor *yd, float *y) {
  if (h != the_dnn || dnn_handles == 0 || need_ctx() != OK) return DNN_NOT_INITIALIZED;
  dnn_geom o;
  int r = dnn_check(xd, wd, cv, yd, &o);
  if (r) return r;
  size_t need;
  if ((r = dnn_ws(algo, &need)) != 0) return r;
  if (wsn < need || (need > 0 && find((unsigned long long)(uintptr_t)ws, need) < 0)) return DNN_BAD_PARAM;
  if (find((unsigned long long)(uintptr_t)x, 4 * dnn_len(xd)) < 0 || find((unsigned long long)(uintptr_t)y, 4 * dnn_len(yd)) < 0 ||
      find((unsigned long long)(uintptr_t)w, 4 * dnn_flen(wd)) < 0)
    return DNN_EXECUTION_FAILED; // the GPU faulted
  return dnn_run(kind, &o, cv->math, *alpha, *beta, x, w, y);
}

int cudnnGetConvolutionForwardAlgorithm_v7(void *h, const dnn_tensor *x, const dnn_filter *w, const dnn_conv *cv,
                                           const dnn_tensor *y, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(x, w, cv, y, &o);
  return r ? r : dnn_algos(h, cv, want, got, p);
}
int cudnnGetConvolutionForwardWorkspaceSize(void *h, const dnn_tensor *x, const dnn_filter *w, const dnn_conv *cv,
                                            const dnn_tensor *y, int algo, size_t *n) {
  (void)h, (void)x, (void)w, (void)cv, (void)y;
  return dnn_ws(algo, n);
}
int cudnnConvolutionForward(void *h, const float *alpha, const dnn_tensor *xd, const float *x, const dnn_filter *wd,
                            const float *w, const dnn_conv *cv, int algo, void *ws, size_t wsn, const float *beta,
                            const dnn_tensor *yd, float *y) {
  return dnn_go(0, h, alpha, xd, (float *)x, wd, (float *)w, cv, algo, ws, wsn, beta, yd, y);
}
int cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, const dnn_filter *w, const dnn_tensor *dy, const dnn_conv *cv,
                                                const dnn_tensor *dx, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(dx, w, cv, dy, &o);
  return r ? r : dnn_algos(h, cv, want, got, p);
}
int cudnnGetConvolutionBackwardDataWorkspaceSize(void *h, const dnn_filter *w, const dnn_tensor *dy, const dnn_conv *cv,
                                                 const dnn_tensor *dx, int algo, size_t *n) {
  (void)h, (void)w, (void)dy, (void)cv, (void)dx;
  return dnn_ws(algo, n);
}
int cudnnConvolutionBackwardData(void *h, const float *alpha, const dnn_filter *wd, const float *w, const dnn_tensor *dyd,
                                 const float *dy, const dnn_conv *cv, int algo, void *ws, size_t wsn, const float *beta,
                                 const dnn_tensor *dxd, float *dx) {
  return dnn_go(1, h, alpha, dxd, dx, wd, (float *)w, cv, algo, ws, wsn, beta, dyd, (float *)dy);
}
int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, const dnn_tensor *x, const dnn_tensor *dy, const dnn_conv *cv,
                                                  const dnn_filter *dw, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(x, dw, cv, dy, &o);
  return r ? r : dnn_algos(h, cv, want, got, p);
}
int cudnnGetConvolutionBackwardFilterWorkspaceSize(void *h, const dnn_tensor *x, const dnn_tensor *dy, const dnn_conv *cv,
                                                   const dnn_filter *dw, int algo, size_t *n) {
  (void)h, (void)x, (void)dy, (void)cv, (void)dw;
  return dnn_ws(algo, n);
}
// The measured choice (DPFINETUNE_CUDNN_ALGO=find) takes the heuristics'
// arguments; the stand-in ranks its two algorithms the other way round,
// the deterministic one first, as if it had measured it faster.
static int dnn_found(void *h, const dnn_conv *cv, int want, int *got, dnn_perf *p) {
  int r = dnn_algos(h, cv, want, got, p);
  if (r == DNN_OK && *got == 2) {
    dnn_perf t = p[0];
    p[0] = p[1];
    p[1] = t;
  }
  return r;
}
int cudnnFindConvolutionForwardAlgorithm(void *h, const dnn_tensor *x, const dnn_filter *w, const dnn_conv *cv,
                                         const dnn_tensor *y, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(x, w, cv, y, &o);
  return r ? r : dnn_found(h, cv, want, got, p);
}
int cudnnFindConvolutionBackwardDataAlgorithm(void *h, const dnn_filter *w, const dnn_tensor *dy, const dnn_conv *cv,
                                              const dnn_tensor *dx, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(dx, w, cv, dy, &o);
  return r ? r : dnn_found(h, cv, want, got, p);
}
int cudnnFindConvolutionBackwardFilterAlgorithm(void *h, const dnn_tensor *x, const dnn_tensor *dy, const dnn_conv *cv,
                                                const dnn_filter *dw, int want, int *got, dnn_perf *p) {
  dnn_geom o;
  int r = dnn_check(x, dw, cv, dy, &o);
  return r ? r : dnn_found(h, cv, want, got, p);
}
int cudnnConvolutionBackwardFilter(void *h, const float *alpha, const dnn_tensor *xd, const float *x, const dnn_tensor *dyd,
                                   const float *dy, const dnn_conv *cv, int algo, void *ws, size_t wsn, const float *beta,
                                   const dnn_filter *dwd, float *dw) {
  return dnn_go(2, h, alpha, xd, (float *)x, dwd, dw, cv, algo, ws, wsn, beta, dyd, (float *)dy);
}
