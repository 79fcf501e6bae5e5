// The four builtin kernels, compiled by hiprtc at run time.
//
// Every kernel takes a pointer per binding, in capture-core's binding order,
// then a pointer to the launch's 16-byte info block. Blocks are 64 threads;
// the grid spills into y past 65535 blocks, so the element index folds y in.
// The index is 64-bit: a grid covering n close to 2^32 would overflow 32 bits
// in its last block.

struct Info {
    unsigned n;
    float scalar;
    unsigned pad[2];
};

__device__ inline unsigned long long element() {
    unsigned long long block =
        (unsigned long long)blockIdx.y * gridDim.x + blockIdx.x;
    return block * 64ull + threadIdx.x;
}

extern "C" __global__ void __launch_bounds__(64)
fill(float* out, const Info* info) {
    unsigned long long i = element();
    if (i < info->n) out[i] = info->scalar;
}

extern "C" __global__ void __launch_bounds__(64)
add(float* x, const float* y, const Info* info) {
    unsigned long long i = element();
    if (i < info->n) x[i] += y[i];
}

extern "C" __global__ void __launch_bounds__(64)
copy(const float* src, float* dst, const Info* info) {
    unsigned long long i = element();
    if (i < info->n) dst[i] = src[i];
}

extern "C" __global__ void __launch_bounds__(64)
axpy(const float* x, float* y, const Info* info) {
    unsigned long long i = element();
    if (i < info->n) y[i] += info->scalar * x[i];
}
