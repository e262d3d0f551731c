// linalg.cu: the part of runtime.LinalgOps (device_linalg.go) done on the
// GPU so far: Axpy. The GEMMs (cuBLAS), Binary and ReduceToShape remain.

// axpy computes y ← y + α·x, the product rounded before the sum.
extern "C" __global__ void axpy(float alpha, const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] += alpha * x[i];
}
