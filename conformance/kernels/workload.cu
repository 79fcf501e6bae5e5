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

// output[i] = input[i] + 1: the side-by-side chain, also run by CuPy.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
add_one(const float* input, float* output, unsigned n) {
    unsigned i = element();
    if (i < n) {
        output[i] = input[i] + 1.0f;
    }
}

// ---- the decoder-only transformer ---------------------------------------
//
// A batch of sequences lies row after row. Token ids and positions are read
// from the device and clamped (a token to vocab - 1, a position to
// context - 1), so no value those buffers hold sends a kernel past its
// bindings. The kernels marked "per row" run one block per row and reduce
// over it with a tree in shared memory.

// The block's linear index: the row a per-row kernel works on.
__device__ static unsigned block_row(void) {
    return blockIdx.y * gridDim.x + blockIdx.x;
}

// x[b * width + c] = table[min(tokens[b], vocab - 1) * width + c].
extern "C" __global__ void __launch_bounds__(WORKGROUP)
embed(const float* table, const unsigned* tokens, float* x, unsigned width, unsigned vocab,
      unsigned batch) {
    unsigned i = element();
    if (i >= batch * width) {
        return;
    }
    unsigned b = i / width;
    unsigned c = i % width;
    unsigned token = min(tokens[b], vocab - 1);
    x[i] = table[(unsigned long long)token * width + c];
}

// rmsnorm of each of rows rows of n; per row.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
rmsnorm_rows(const float* x, const float* w, float* out, unsigned n, unsigned rows, float eps) {
    __shared__ float partial[WORKGROUP];
    unsigned row = block_row();
    if (row >= rows) {
        return;
    }
    unsigned t = threadIdx.x;
    const float* xr = x + (unsigned long long)row * n;
    float* outr = out + (unsigned long long)row * n;
    float sum = 0.0f;
    for (unsigned j = t; j < n; j += WORKGROUP) {
        sum += xr[j] * xr[j];
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
        outr[j] = xr[j] * scale * w[j];
    }
}

// y[b * rows + r] = sum over c of w[r * cols + c] * x[b * cols + c].
extern "C" __global__ void __launch_bounds__(WORKGROUP)
matmul(const float* w, const float* x, float* y, unsigned rows, unsigned cols, unsigned batch) {
    unsigned i = element();
    if (i >= batch * rows) {
        return;
    }
    unsigned b = i / rows;
    unsigned r = i % rows;
    const float* row = w + (unsigned long long)r * cols;
    const float* v = x + (unsigned long long)b * cols;
    float acc = 0.0f;
    for (unsigned c = 0; c < cols; ++c) {
        acc += row[c] * v[c];
    }
    y[i] = acc;
}

// Rotates pair (2k, 2k + 1) of each head of each row by its sequence's
// position's (cos, sin) in table.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
rope(float* x, const unsigned* pos, const float* table, unsigned width, unsigned head_dim,
     unsigned batch, unsigned context) {
    unsigned i = element();
    unsigned pairs = width / 2;
    if (i >= batch * pairs) {
        return;
    }
    unsigned b = i / pairs;
    unsigned j = i % pairs;
    unsigned half = head_dim / 2;
    unsigned head = j / half;
    unsigned k = j % half;
    unsigned p = min(pos[b], context - 1);
    float c = table[(p * half + k) * 2];
    float s = table[(p * half + k) * 2 + 1];
    unsigned at = b * width + head * head_dim + 2 * k;
    float x0 = x[at];
    float x1 = x[at + 1];
    x[at] = x0 * c - x1 * s;
    x[at + 1] = x0 * s + x1 * c;
}

// Row b of k and v into row b * context + p of each cache.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
kv_append(const float* k, const float* v, const unsigned* pos, float* k_cache, float* v_cache,
          unsigned width, unsigned context, unsigned batch) {
    unsigned i = element();
    if (i >= batch * width) {
        return;
    }
    unsigned b = i / width;
    unsigned c = i % width;
    unsigned p = min(pos[b], context - 1);
    unsigned long long at = ((unsigned long long)b * context + p) * width + c;
    k_cache[at] = k[i];
    v_cache[at] = v[i];
}

// scores[(b * heads + h) * context + t] = scale * (q_bh . k_cache_bth) for
// t <= p, else 0; the grid covers the whole context, so it never changes.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
attn_scores(const float* q, const float* k_cache, const unsigned* pos, float* scores,
            unsigned width, unsigned head_dim, unsigned context, unsigned batch, float scale) {
    unsigned i = element();
    unsigned heads = width / head_dim;
    if (i >= batch * heads * context) {
        return;
    }
    unsigned t = i % context;
    unsigned bh = i / context;
    unsigned b = bh / heads;
    unsigned h = bh % heads;
    unsigned p = min(pos[b], context - 1);
    if (t > p) {
        scores[i] = 0.0f;
        return;
    }
    const float* qh = q + (unsigned long long)b * width + h * head_dim;
    const float* kh = k_cache + ((unsigned long long)b * context + t) * width + h * head_dim;
    float acc = 0.0f;
    for (unsigned d = 0; d < head_dim; ++d) {
        acc += qh[d] * kh[d];
    }
    scores[i] = acc * scale;
}

// Softmax of each (sequence, head) row over t <= p, 0 past it; per row.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
attn_softmax(float* scores, const unsigned* pos, unsigned context, unsigned heads,
             unsigned batch) {
    __shared__ float partial[WORKGROUP];
    unsigned row = block_row();
    if (row >= batch * heads) {
        return;
    }
    unsigned t = threadIdx.x;
    unsigned len = min(pos[row / heads], context - 1) + 1;
    float* s = scores + (unsigned long long)row * context;
    float m = -3.402823466e+38f;
    for (unsigned j = t; j < len; j += WORKGROUP) {
        m = fmaxf(m, s[j]);
    }
    partial[t] = m;
    __syncthreads();
    for (unsigned stride = WORKGROUP / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            partial[t] = fmaxf(partial[t], partial[t + stride]);
        }
        __syncthreads();
    }
    float top = partial[0];
    __syncthreads();
    float sum = 0.0f;
    for (unsigned j = t; j < len; j += WORKGROUP) {
        float e = expf(s[j] - top);
        s[j] = e;
        sum += e;
    }
    partial[t] = sum;
    __syncthreads();
    for (unsigned stride = WORKGROUP / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        __syncthreads();
    }
    float total = partial[0];
    for (unsigned j = t; j < context; j += WORKGROUP) {
        s[j] = j < len ? s[j] / total : 0.0f;
    }
}

// out[b * width + c] = sum over t <= p of
// probs[(b * heads + h) * context + t] * v_cache[(b * context + t) * width + c].
extern "C" __global__ void __launch_bounds__(WORKGROUP)
attn_values(const float* probs, const float* v_cache, const unsigned* pos, float* out,
            unsigned width, unsigned head_dim, unsigned context, unsigned batch) {
    unsigned i = element();
    if (i >= batch * width) {
        return;
    }
    unsigned heads = width / head_dim;
    unsigned b = i / width;
    unsigned c = i % width;
    unsigned h = c / head_dim;
    unsigned len = min(pos[b], context - 1) + 1;
    const float* p = probs + ((unsigned long long)b * heads + h) * context;
    const float* v = v_cache + (unsigned long long)b * context * width + c;
    float acc = 0.0f;
    for (unsigned t = 0; t < len; ++t) {
        acc += p[t] * v[(unsigned long long)t * width];
    }
    out[i] = acc;
}

// gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i].
extern "C" __global__ void __launch_bounds__(WORKGROUP)
silu_mul(float* gate, const float* up, unsigned n) {
    unsigned i = element();
    if (i < n) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// The first index of each row's largest logit (NaN never wins) into
// tokens[b] and generated[b * context + p]; per row.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
argmax(const float* logits, const unsigned* pos, unsigned* tokens, unsigned* generated,
       unsigned vocab, unsigned context, unsigned batch) {
    __shared__ float value[WORKGROUP];
    __shared__ unsigned index[WORKGROUP];
    unsigned b = block_row();
    if (b >= batch) {
        return;
    }
    unsigned t = threadIdx.x;
    const float* row = logits + (unsigned long long)b * vocab;
    float best = -3.402823466e+38f;
    unsigned at = vocab;
    for (unsigned j = t; j < vocab; j += WORKGROUP) {
        if (row[j] > best) {
            best = row[j];
            at = j;
        }
    }
    value[t] = best;
    index[t] = at;
    __syncthreads();
    for (unsigned stride = WORKGROUP / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            float v = value[t + stride];
            unsigned k = index[t + stride];
            if (v > value[t] || (v == value[t] && k < index[t])) {
                value[t] = v;
                index[t] = k;
            }
        }
        __syncthreads();
    }
    if (t == 0) {
        unsigned token = index[0] < vocab ? index[0] : 0;
        tokens[b] = token;
        generated[(unsigned long long)b * context + min(pos[b], context - 1)] = token;
    }
}

// pos[b] = min(min(pos[b], context - 1) + 1, context - 1).
extern "C" __global__ void __launch_bounds__(WORKGROUP)
advance(unsigned* pos, unsigned context, unsigned batch) {
    unsigned i = element();
    if (i < batch) {
        unsigned p = min(pos[i], context - 1);
        pos[i] = min(p + 1, context - 1);
    }
}

// counter[0] -= 1; flag[0] = counter[0] > 0 (a loop's flag, 1 or 0).
extern "C" __global__ void __launch_bounds__(WORKGROUP)
countdown(float* counter, unsigned* flag) {
    if (element() == 0) {
        float c = counter[0] - 1.0f;
        counter[0] = c;
        flag[0] = c > 0.5f ? 1u : 0u;
    }
}

// A sequence that emitted the end token is done: its token and position
// are held there from then on. flag[0] = whether any sequence runs on.
extern "C" __global__ void __launch_bounds__(WORKGROUP)
settle(unsigned* tokens, unsigned* pos, unsigned* done, unsigned* held, unsigned* flag,
       unsigned end, unsigned batch) {
    if (element() != 0) {
        return;
    }
    unsigned running = 0;
    for (unsigned b = 0; b < batch; b++) {
        if (done[b] != 0) {
            tokens[b] = end;
            pos[b] = held[b];
        } else if (tokens[b] == end) {
            done[b] = 1;
            held[b] = pos[b];
        }
        if (done[b] == 0) {
            running = 1;
        }
    }
    flag[0] = running;
}
