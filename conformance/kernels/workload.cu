// The workload's kernels in the language CUDA (NVRTC) and HIP (hiprtc) share.
//
// Every kernel is 1-D over 64-thread workgroups: element
// i = (blockIdx.y * gridDim.x + blockIdx.x) * 64 + threadIdx.x, and threads
// past the element count do nothing. Parameters follow the library's
// convention: the bound buffers first, in binding order, then the by-value
// parameters in declaration order (none of these kernels reads info bytes).
// Sums run in index order, one thread per output element, so the results
// match a sequential CPU reference up to rounding of the library functions.

#define WORKGROUP 64

__device__ static unsigned element(void) {
    return (blockIdx.y * gridDim.x + blockIdx.x) * WORKGROUP + threadIdx.x;
}

// out[i] = x[i] / sqrt(mean(x[0..n]^2) + eps) * w[i]; one workgroup.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
rmsnorm(const float* x, const float* w, float* out, unsigned n, float eps) {
    __shared__ float partial[WORKGROUP];
    unsigned t = threadIdx.x;
    float sum = 0.0f;
    for (unsigned j = t; j < n; j += WORKGROUP) {
        sum += x[j] * x[j];
    }
    partial[t] = sum;
    __syncthreads();
    for (unsigned stride = WORKGROUP / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        __syncthreads();
    }
    float scale = 1.0f / sqrtf(partial[0] / (float)n + eps);
    for (unsigned j = t; j < n; j += WORKGROUP) {
        out[j] = x[j] * scale * w[j];
    }
}

// y[r] = sum over c of w[r * cols + c] * x[c], for r < rows.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
matvec(const float* w, const float* x, float* y, unsigned rows, unsigned cols) {
    unsigned r = element();
    if (r >= rows) {
        return;
    }
    const float* row = w + (unsigned long long)r * cols;
    float acc = 0.0f;
    for (unsigned c = 0; c < cols; ++c) {
        acc += row[c] * x[c];
    }
    y[r] = acc;
}

// x[i] = x[i] / (1 + exp(-x[i])).
extern "C" __global__ void __launch_bounds__(WORKGROUP)
silu(float* x, unsigned n) {
    unsigned i = element();
    if (i < n) {
        float v = x[i];
        x[i] = v / (1.0f + expf(-v));
    }
}

// x[i] += y[i].
extern "C" __global__ void __launch_bounds__(WORKGROUP)
residual(float* x, const float* y, unsigned n) {
    unsigned i = element();
    if (i < n) {
        x[i] = x[i] + y[i];
    }
}

// x[i] = x[i] * a + b.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
scale(float* x, unsigned n, float a, float b) {
    unsigned i = element();
    if (i < n) {
        x[i] = x[i] * a + b;
    }
}
