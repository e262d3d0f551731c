// cuda_emu.h: the CUDA built-ins the kernels of runtime/cuda use, for the
// host C++ compiler, so that the same kernel sources run without a GPU
// (the emulated driver, emulate.go). The Go side prepends this header to a
// kernel source, appends one EMU_EXPORT(name) line per __global__ function
// and builds a shared library with g++ (-ffp-contract=off, no fast math:
// float arithmetic rounds as NVRTC's --fmad=false code does).
//
// Execution model. A launch runs the grid's blocks one after another. The
// threads of a block are real POSIX threads, a pool created as launches
// first need them and kept, each running every block in turn with its own
// threadIdx; __syncthreads is a
// barrier over the block's threads and a barrier ends every block, so a
// block's threads see each other's writes as on the GPU. Warps are the
// block's threads 32 by 32 in linear order (x fastest, as CUDA numbers
// them); the warp shuffles exchange values through per-thread slots and
// one barrier over the warp's threads (two slot sets used in turn, so
// that a slot is not rewritten before the warp's next barrier, which
// every reader of it has passed). A barrier wakes real threads, so it is
// the emulation's main cost: emu_warp_sum gives the common.cuh reduction
// warp_sum, five shuffles on the GPU, with one exchange, each lane then
// running the same tree over the warp's values.
//
// Restrictions the kernels follow (each is also CUDA's own rule, so a
// kernel that breaks one is wrong on the GPU too):
//   - __shared__ variables are declared inside kernels (block scope) and
//     not initialized: __shared__ expands to `static`, one instance for the
//     whole launch, which is correct because one block runs at a time and
//     a block may not assume anything about shared memory it did not
//     write. Dynamic shared memory is declared with DYN_SHARED(T, name).
//   - every thread of a block reaches each __syncthreads, and every thread
//     of a warp each shuffle (full mask): a thread that returned early
//     would leave the others waiting forever.
//   - launches are serialized by the caller (the emulated driver holds a
//     lock): the launch state and the shared arrays are per library.
#pragma once

// CUDA_EMU tells a kernel source it is compiled for the emulation
// (common.cuh's warp_sum takes emu_warp_sum).
#define CUDA_EMU 1

#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static
#define __launch_bounds__(...)
#define DYN_SHARED(T, name) T *name = (T *)emu_L.dyn_shared

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
};

enum { warpSize = 32, EMU_MAX_THREADS = 1024 };

static thread_local uint3 threadIdx, blockIdx;
static thread_local dim3 blockDim, gridDim;
// emu_tid is the thread's linear index in its block; its warp is
// emu_tid / 32 and its lane emu_tid % 32.
static thread_local unsigned emu_tid;

// emu_L is the state of the launch in progress.
static struct {
  unsigned grid[3], block[3], nthreads;
  void (*body)(void **);
  void **args;
  unsigned char *dyn_shared;
  pthread_barrier_t block_bar;
  pthread_barrier_t warp_bar[EMU_MAX_THREADS / 32];
  uint64_t slot[2][EMU_MAX_THREADS]; // the shuffles' exchange, used in turn
} emu_L;

// emu_phase is the slot set the thread's next exchange uses; it starts
// at 0 with each launch, and every thread of a warp makes the same
// exchanges, so a warp's threads agree on it.
static thread_local unsigned emu_phase;

static inline void __syncthreads(void) { pthread_barrier_wait(&emu_L.block_bar); }

// __threadfence: the barriers already order memory; a full fence for
// kernels that publish through atomics.
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// --- warp shuffles ---------------------------------------------------------

// emu_warp_size is the number of threads in the calling thread's warp (the
// last warp of a block may be partial).
static inline unsigned emu_warp_size(void) {
  unsigned w = emu_tid / 32, n = emu_L.nthreads - w * 32;
  return n < 32 ? n : 32;
}

// emu_exchange publishes v and returns the value lane src of the warp
// published (v itself if src is outside the warp).
static inline uint64_t emu_exchange(uint64_t v, unsigned src) {
  unsigned w = emu_tid / 32;
  uint64_t *slot = emu_L.slot[emu_phase];
  emu_phase ^= 1;
  slot[emu_tid] = v;
  pthread_barrier_wait(&emu_L.warp_bar[w]);
  return src < emu_warp_size() ? slot[w * 32 + src] : v;
}

// emu_warp_sum returns what the loop
//   for (k = 16; k > 0; k /= 2) s += __shfl_down_sync(~0u, s, k);
// returns to the calling lane, bit for bit (a lane whose source is beyond
// the warp adds its own value, as __shfl_down_sync returns it), after one
// exchange of the lanes' values instead of five (T: float or double).
template <class T> static inline T emu_warp_sum(T s) {
  static_assert(sizeof(T) <= 8, "warp sum of a value wider than 8 bytes");
  unsigned w = emu_tid / 32, lane = emu_tid % 32, n = emu_warp_size();
  uint64_t *slot = emu_L.slot[emu_phase];
  emu_phase ^= 1;
  memcpy(&slot[emu_tid], &s, sizeof(T));
  pthread_barrier_wait(&emu_L.warp_bar[w]);
  T v[32];
  for (unsigned l = 0; l < n; l++) memcpy(&v[l], &slot[w * 32 + l], sizeof(T));
  for (unsigned k = 16; k > 0; k /= 2)
    for (unsigned l = 0; l < n; l++) v[l] += l + k < n ? v[l + k] : v[l]; // l + k > l: read before written this round
  return v[lane];
}

template <class T> static inline T emu_shfl_lane(T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  bits = emu_exchange(bits, src);
  T r;
  memcpy(&r, &bits, sizeof(T));
  return r;
}

// __shfl_sync returns v of lane srcLane of the caller's width-lane segment.
template <class T> static inline T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
  (void)mask;
  unsigned lane = emu_tid % 32, base = lane / width * width;
  return emu_shfl_lane(v, base + (unsigned)srcLane % width);
}

// __shfl_down_sync returns v of lane lane+delta, or the caller's own v when
// that lane is beyond the caller's width-lane segment.
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  unsigned lane = emu_tid % 32;
  unsigned src = lane % width + delta < (unsigned)width ? lane + delta : lane;
  return emu_shfl_lane(v, src);
}

// __shfl_xor_sync returns v of lane lane^laneMask (within the caller's
// width-lane segment).
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  (void)mask;
  unsigned lane = emu_tid % 32;
  unsigned src = lane ^ (unsigned)laneMask;
  if (src / width != lane / width) src = lane;
  return emu_shfl_lane(v, src);
}

// --- atomics ---------------------------------------------------------------

static inline int atomicAdd(int *a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicAdd(unsigned *a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}

// The floating-point atomicAdd is a compare-and-swap loop on the bits, as
// the GPU's is a read-modify-write: the sum is rounded once per addition.
template <class F, class U> static inline F emu_atomic_add_float(F *a, F v) {
  U *p = (U *)a;
  U old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  for (;;) {
    F f;
    memcpy(&f, &old, sizeof f);
    F s = f + v;
    U nw;
    memcpy(&nw, &s, sizeof nw);
    if (__atomic_compare_exchange_n(p, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return f;
  }
}
static inline float atomicAdd(float *a, float v) { return emu_atomic_add_float<float, uint32_t>(a, v); }
static inline double atomicAdd(double *a, double v) { return emu_atomic_add_float<double, uint64_t>(a, v); }

static inline int atomicCAS(int *a, int compare, int val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare; // the old value either way
}
static inline unsigned atomicCAS(unsigned *a, unsigned compare, unsigned val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
static inline int atomicMax(int *a, int v) {
  int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
static inline int atomicExch(int *a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }

// --- math and bit casts ----------------------------------------------------

// sqrtf, expf, logf, sqrt, exp, log, frexp come from libm; on the GPU (no
// fast math) sqrtf, sqrt and the divisions are correctly rounded, as here.
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline int __float_as_int(float f) {
  int u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __int_as_float(int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline long long __double_as_longlong(double d) {
  long long u;
  memcpy(&u, &d, 8);
  return u;
}
static inline double __longlong_as_double(long long u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

// --- launches ----------------------------------------------------------------

// The threads of a block are a pool, created as launches first need them
// and kept for the library's lifetime: a launch wakes its block's threads
// (each through its own semaphore) and waits for each to post done.
static struct {
  pthread_mutex_t mu; // serializes pool growth
  unsigned created;
  sem_t go[EMU_MAX_THREADS];
  sem_t done;
  int done_ok;
} emu_pool = {PTHREAD_MUTEX_INITIALIZER, 0, {}, {}, 0};

// emu_block_loop runs every block of the launch as thread tid.
static void emu_block_loop(unsigned tid) {
  emu_tid = tid;
  emu_phase = 0;
  blockDim = dim3{emu_L.block[0], emu_L.block[1], emu_L.block[2]};
  gridDim = dim3{emu_L.grid[0], emu_L.grid[1], emu_L.grid[2]};
  threadIdx = uint3{tid % blockDim.x, tid / blockDim.x % blockDim.y, tid / (blockDim.x * blockDim.y)};
  for (unsigned z = 0; z < gridDim.z; z++)
    for (unsigned y = 0; y < gridDim.y; y++)
      for (unsigned x = 0; x < gridDim.x; x++) {
        blockIdx = uint3{x, y, z};
        emu_L.body(emu_L.args);
        pthread_barrier_wait(&emu_L.block_bar); // the block ends for all its threads
      }
}

static void *emu_worker(void *arg) {
  unsigned tid = (unsigned)(uintptr_t)arg;
  for (;;) {
    while (sem_wait(&emu_pool.go[tid]) != 0) {
    }
    emu_block_loop(tid);
    sem_post(&emu_pool.done);
  }
  return 0;
}

// emu_grow makes the pool n threads large; false if a thread could not be
// created.
static bool emu_grow(unsigned n) {
  pthread_mutex_lock(&emu_pool.mu);
  if (!emu_pool.done_ok) {
    sem_init(&emu_pool.done, 0, 0);
    emu_pool.done_ok = 1;
  }
  bool ok = true;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 512 << 10);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  while (emu_pool.created < n) {
    unsigned t = emu_pool.created;
    sem_init(&emu_pool.go[t], 0, 0);
    pthread_t th;
    if (pthread_create(&th, &attr, emu_worker, (void *)(uintptr_t)t) != 0) {
      sem_destroy(&emu_pool.go[t]);
      ok = false;
      break;
    }
    emu_pool.created++;
  }
  pthread_attr_destroy(&attr);
  pthread_mutex_unlock(&emu_pool.mu);
  return ok;
}

// emu_run runs one launch: cfg is grid x, y, z, block x, y, z and the
// dynamic shared memory in bytes. It returns 0, 1 for an invalid
// configuration, 2 when the threads could not be created.
static int emu_run(const unsigned *cfg, void **args, void (*body)(void **)) {
  for (int i = 0; i < 6; i++)
    if (cfg[i] == 0) return 1;
  unsigned long long n = (unsigned long long)cfg[3] * cfg[4] * cfg[5];
  if (n > EMU_MAX_THREADS || cfg[5] > 64) return 1;
  if (!emu_grow((unsigned)n)) return 2;
  memcpy(emu_L.grid, cfg, sizeof emu_L.grid);
  memcpy(emu_L.block, cfg + 3, sizeof emu_L.block);
  emu_L.nthreads = (unsigned)n;
  emu_L.body = body;
  emu_L.args = args;
  emu_L.dyn_shared = 0;
  if (cfg[6] > 0) {
    emu_L.dyn_shared = (unsigned char *)aligned_alloc(16, (cfg[6] + 15) / 16 * 16);
    if (!emu_L.dyn_shared) return 2;
  }
  unsigned warps = (emu_L.nthreads + 31) / 32;
  pthread_barrier_init(&emu_L.block_bar, 0, emu_L.nthreads);
  for (unsigned w = 0; w < warps; w++) {
    unsigned m = emu_L.nthreads - w * 32;
    pthread_barrier_init(&emu_L.warp_bar[w], 0, m < 32 ? m : 32);
  }
  // sem_post and sem_wait order memory: the workers see the state above,
  // and the caller sees everything the kernel wrote.
  for (unsigned t = 0; t < emu_L.nthreads; t++) sem_post(&emu_pool.go[t]);
  for (unsigned t = 0; t < emu_L.nthreads; t++)
    while (sem_wait(&emu_pool.done) != 0) {
    }
  pthread_barrier_destroy(&emu_L.block_bar);
  for (unsigned w = 0; w < warps; w++) pthread_barrier_destroy(&emu_L.warp_bar[w]);
  free(emu_L.dyn_shared);
  emu_L.dyn_shared = 0;
  return 0;
}

// emu_call calls kernel k with its arguments unpacked from a, CUDA's
// argument array (a[i] points to argument i): the parameter types come
// from k's own type, so the Go side only lists the kernels' names.
template <class... P, size_t... I>
static void emu_call_i(void (*k)(P...), void **a, std::index_sequence<I...>) {
  (void)a;
  k(*static_cast<typename std::remove_cv<P>::type *>(a[I])...);
}
template <class... P> static void emu_call(void (*k)(P...), void **a) {
  emu_call_i(k, a, std::index_sequence_for<P...>{});
}

// emu_aligned reports whether argument a, of parameter type P, is
// aligned as the GPU requires: a pointer to T at a multiple of alignof(T)
// (a null pointer is; other arguments are passed by value). The host
// tolerates a misaligned load that faults on the GPU (a float64 view at
// an odd float32 offset), so the emulation refuses the launch instead.
template <class P> static bool emu_aligned(void *a) {
  typedef typename std::remove_cv<P>::type T;
  if constexpr (std::is_pointer<T>::value) {
    typedef typename std::remove_pointer<T>::type E;
    if constexpr (!std::is_void<E>::value && !std::is_function<E>::value) {
      return (uintptr_t)*static_cast<T *>(a) % alignof(E) == 0;
    }
  }
  return true;
}
template <class... P, size_t... I>
static bool emu_args_aligned_i(void (*)(P...), void **a, std::index_sequence<I...>) {
  (void)a;
  return (true && ... && emu_aligned<P>(a[I]));
}
template <class... P> static bool emu_args_aligned(void (*k)(P...), void **a) {
  return emu_args_aligned_i(k, a, std::index_sequence_for<P...>{});
}

// EMU_EXPORT(name) defines the launcher of kernel name, the entry point
// the emulated driver looks up (emu_launch_<name>). It returns emu_run's
// codes, or 3 when a pointer argument is misaligned for its type.
#define EMU_EXPORT(name)                                                          \
  extern "C" __attribute__((visibility("default"))) int emu_launch_##name(        \
      const unsigned *cfg, void **args) {                                         \
    if (!emu_args_aligned(name, args)) return 3;                                  \
    return emu_run(cfg, args, [](void **a) { emu_call(name, a); });               \
  }
