// The workload's kernels in WGSL, for the Vulkan backend (naga compiles
// them to SPIR-V).
//
// A module may declare only one push-constant block, and each kernel's
// parameters differ, so this file holds one module per kernel: the shared
// prelude up to the first `// kernel: NAME` line, then one section per
// kernel, each starting at such a line. A kernel's module is the prelude
// and its own section (workload/vulkan.rs blanks the other sections, so
// naga's line numbers are this file's).
//
// Every kernel is 1-D over 64-thread workgroups: element
// i = (group.y * groups.x + group.x) * 64 + local.x, and threads past the
// element count do nothing. Bindings follow the library's convention: the
// bound buffers at bindings 0..k of set 0, in binding order, and the
// by-value parameters as one push-constant block, packed in declaration
// order (none of these kernels reads info bytes). Sums run in index order,
// one thread per output element, as in workload.cu.

const WORKGROUP: u32 = 64u;

fn element(group: vec3<u32>, groups: vec3<u32>, local: vec3<u32>) -> u32 {
    return (group.y * groups.x + group.x) * WORKGROUP + local.x;
}

// The workgroup's linear index: the row a per-row kernel works on.
fn row_index(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.y * groups.x + group.x;
}

// The most negative f32, where a maximum starts.
fn lowest() -> f32 {
    return bitcast<f32>(0xff7fffffu);
}

// kernel: rmsnorm
// out[i] = x[i] / sqrt(mean(x[0..n]^2) + eps) * w[i]; one workgroup.

struct RmsNormParams {
    n: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> rms_x: array<f32>;
@group(0) @binding(1) var<storage, read> rms_w: array<f32>;
@group(0) @binding(2) var<storage, read_write> rms_out: array<f32>;
var<immediate> rms: RmsNormParams;

var<workgroup> partial: array<f32, WORKGROUP>;

@compute @workgroup_size(64)
fn rmsnorm(@builtin(local_invocation_index) t: u32) {
    let n = rms.n;
    var sum = 0.0;
    for (var j = t; j < n; j += WORKGROUP) {
        sum += rms_x[j] * rms_x[j];
    }
    partial[t] = sum;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(partial[0] / f32(n) + rms.eps);
    for (var j = t; j < n; j += WORKGROUP) {
        rms_out[j] = rms_x[j] * scale * rms_w[j];
    }
}

// kernel: matvec
// y[r] = sum over c of w[r * cols + c] * x[c], for r < rows.

struct MatVecParams {
    rows: u32,
    cols: u32,
}

@group(0) @binding(0) var<storage, read> mv_w: array<f32>;
@group(0) @binding(1) var<storage, read> mv_x: array<f32>;
@group(0) @binding(2) var<storage, read_write> mv_y: array<f32>;
var<immediate> mv: MatVecParams;

@compute @workgroup_size(64)
fn matvec(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let r = element(group, groups, local);
    if (r >= mv.rows) {
        return;
    }
    let row = r * mv.cols;
    var acc = 0.0;
    for (var c = 0u; c < mv.cols; c++) {
        acc += mv_w[row + c] * mv_x[c];
    }
    mv_y[r] = acc;
}

// kernel: silu
// x[i] = x[i] / (1 + exp(-x[i])).

@group(0) @binding(0) var<storage, read_write> silu_x: array<f32>;
var<immediate> silu_n: u32;

@compute @workgroup_size(64)
fn silu(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < silu_n) {
        let v = silu_x[i];
        silu_x[i] = v / (1.0 + exp(-v));
    }
}

// kernel: residual
// x[i] += y[i].

@group(0) @binding(0) var<storage, read_write> res_x: array<f32>;
@group(0) @binding(1) var<storage, read> res_y: array<f32>;
var<immediate> res_n: u32;

@compute @workgroup_size(64)
fn residual(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < res_n) {
        res_x[i] = res_x[i] + res_y[i];
    }
}

// kernel: scale
// x[i] = x[i] * a + b.

struct ScaleParams {
    n: u32,
    a: f32,
    b: f32,
}

@group(0) @binding(0) var<storage, read_write> scale_x: array<f32>;
var<immediate> sc: ScaleParams;

@compute @workgroup_size(64)
fn scale(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < sc.n) {
        scale_x[i] = scale_x[i] * sc.a + sc.b;
    }
}

// kernel: add_one
// output[i] = input[i] + 1: the side-by-side chain.

struct AddOneParams {
    n: u32,
}

@group(0) @binding(0) var<storage, read> add_input: array<f32>;
@group(0) @binding(1) var<storage, read_write> add_output: array<f32>;
var<immediate> ao: AddOneParams;

@compute @workgroup_size(64)
fn add_one(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < ao.n) {
        add_output[i] = add_input[i] + 1.0;
    }
}

// ---- the decoder-only transformer ----------------------------------------
//
// A batch of sequences lies row after row. Token ids and positions are read
// from the device and clamped (a token to vocab - 1, a position to
// context - 1), as in workload.cu. The kernels marked "per row" run one
// workgroup per row and reduce over it with a tree in workgroup memory.

// kernel: embed
// x[b * width + c] = table[min(tokens[b], vocab - 1) * width + c].

struct EmbedParams {
    width: u32,
    vocab: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> emb_table: array<f32>;
@group(0) @binding(1) var<storage, read> emb_tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> emb_x: array<f32>;
var<immediate> emb: EmbedParams;

@compute @workgroup_size(64)
fn embed(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i >= emb.batch * emb.width) {
        return;
    }
    let b = i / emb.width;
    let c = i % emb.width;
    let token = min(emb_tokens[b], emb.vocab - 1u);
    emb_x[i] = emb_table[token * emb.width + c];
}

// kernel: rmsnorm_rows
// rmsnorm of each of rows rows of n; per row.

struct RmsNormRowsParams {
    n: u32,
    rows: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> rr_x: array<f32>;
@group(0) @binding(1) var<storage, read> rr_w: array<f32>;
@group(0) @binding(2) var<storage, read_write> rr_out: array<f32>;
var<immediate> rr: RmsNormRowsParams;

var<workgroup> rr_partial: array<f32, WORKGROUP>;

@compute @workgroup_size(64)
fn rmsnorm_rows(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = row_index(group, groups);
    if (row >= rr.rows) {
        return;
    }
    let n = rr.n;
    let base = row * n;
    var sum = 0.0;
    for (var j = t; j < n; j += WORKGROUP) {
        sum += rr_x[base + j] * rr_x[base + j];
    }
    rr_partial[t] = sum;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            rr_partial[t] += rr_partial[t + stride];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(rr_partial[0] / f32(n) + rr.eps);
    for (var j = t; j < n; j += WORKGROUP) {
        rr_out[base + j] = rr_x[base + j] * scale * rr_w[j];
    }
}

// kernel: matmul
// y[b * rows + r] = sum over c of w[r * cols + c] * x[b * cols + c].

struct MatMulParams {
    rows: u32,
    cols: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> mm_w: array<f32>;
@group(0) @binding(1) var<storage, read> mm_x: array<f32>;
@group(0) @binding(2) var<storage, read_write> mm_y: array<f32>;
var<immediate> mm: MatMulParams;

@compute @workgroup_size(64)
fn matmul(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i >= mm.batch * mm.rows) {
        return;
    }
    let row = (i % mm.rows) * mm.cols;
    let v = (i / mm.rows) * mm.cols;
    var acc = 0.0;
    for (var c = 0u; c < mm.cols; c++) {
        acc += mm_w[row + c] * mm_x[v + c];
    }
    mm_y[i] = acc;
}

// kernel: rope
// Rotates pair (2k, 2k + 1) of each head of each row by its sequence's
// position's (cos, sin) in table.

struct RopeParams {
    width: u32,
    head_dim: u32,
    batch: u32,
    context: u32,
}

@group(0) @binding(0) var<storage, read_write> rope_x: array<f32>;
@group(0) @binding(1) var<storage, read> rope_pos: array<u32>;
@group(0) @binding(2) var<storage, read> rope_table: array<f32>;
var<immediate> rp: RopeParams;

@compute @workgroup_size(64)
fn rope(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    let pairs = rp.width / 2u;
    if (i >= rp.batch * pairs) {
        return;
    }
    let b = i / pairs;
    let j = i % pairs;
    let half = rp.head_dim / 2u;
    let head = j / half;
    let k = j % half;
    let p = min(rope_pos[b], rp.context - 1u);
    let c = rope_table[(p * half + k) * 2u];
    let s = rope_table[(p * half + k) * 2u + 1u];
    let at = b * rp.width + head * rp.head_dim + 2u * k;
    let x0 = rope_x[at];
    let x1 = rope_x[at + 1u];
    rope_x[at] = x0 * c - x1 * s;
    rope_x[at + 1u] = x0 * s + x1 * c;
}

// kernel: kv_append
// Row b of k and v into row b * context + p of each cache.

struct KvAppendParams {
    width: u32,
    context: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> kv_k: array<f32>;
@group(0) @binding(1) var<storage, read> kv_v: array<f32>;
@group(0) @binding(2) var<storage, read> kv_pos: array<u32>;
@group(0) @binding(3) var<storage, read_write> kv_k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> kv_v_cache: array<f32>;
var<immediate> kv: KvAppendParams;

@compute @workgroup_size(64)
fn kv_append(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i >= kv.batch * kv.width) {
        return;
    }
    let b = i / kv.width;
    let c = i % kv.width;
    let p = min(kv_pos[b], kv.context - 1u);
    let at = (b * kv.context + p) * kv.width + c;
    kv_k_cache[at] = kv_k[i];
    kv_v_cache[at] = kv_v[i];
}

// kernel: attn_scores
// scores[(b * heads + h) * context + t] = scale * (q_bh . k_cache_bth) for
// t <= p, else 0; the grid covers the whole context, so it never changes.

struct AttnScoresParams {
    width: u32,
    head_dim: u32,
    context: u32,
    batch: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> sc_q: array<f32>;
@group(0) @binding(1) var<storage, read> sc_k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> sc_pos: array<u32>;
@group(0) @binding(3) var<storage, read_write> sc_scores: array<f32>;
var<immediate> sc: AttnScoresParams;

@compute @workgroup_size(64)
fn attn_scores(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    let heads = sc.width / sc.head_dim;
    if (i >= sc.batch * heads * sc.context) {
        return;
    }
    let t = i % sc.context;
    let bh = i / sc.context;
    let b = bh / heads;
    let h = bh % heads;
    let p = min(sc_pos[b], sc.context - 1u);
    if (t > p) {
        sc_scores[i] = 0.0;
        return;
    }
    let q = b * sc.width + h * sc.head_dim;
    let k = (b * sc.context + t) * sc.width + h * sc.head_dim;
    var acc = 0.0;
    for (var d = 0u; d < sc.head_dim; d++) {
        acc += sc_q[q + d] * sc_k_cache[k + d];
    }
    sc_scores[i] = acc * sc.scale;
}

// kernel: attn_softmax
// Softmax of each (sequence, head) row over t <= p, 0 past it; per row.

struct AttnSoftmaxParams {
    context: u32,
    heads: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read_write> sm_scores: array<f32>;
@group(0) @binding(1) var<storage, read> sm_pos: array<u32>;
var<immediate> sm: AttnSoftmaxParams;

var<workgroup> sm_partial: array<f32, WORKGROUP>;

@compute @workgroup_size(64)
fn attn_softmax(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = row_index(group, groups);
    if (row >= sm.batch * sm.heads) {
        return;
    }
    let len = min(sm_pos[row / sm.heads], sm.context - 1u) + 1u;
    let base = row * sm.context;
    var m = lowest();
    for (var j = t; j < len; j += WORKGROUP) {
        m = max(m, sm_scores[base + j]);
    }
    sm_partial[t] = m;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            sm_partial[t] = max(sm_partial[t], sm_partial[t + stride]);
        }
        workgroupBarrier();
    }
    let top = sm_partial[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var j = t; j < len; j += WORKGROUP) {
        let e = exp(sm_scores[base + j] - top);
        sm_scores[base + j] = e;
        sum += e;
    }
    sm_partial[t] = sum;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            sm_partial[t] += sm_partial[t + stride];
        }
        workgroupBarrier();
    }
    let total = sm_partial[0];
    for (var j = t; j < sm.context; j += WORKGROUP) {
        if (j < len) {
            sm_scores[base + j] = sm_scores[base + j] / total;
        } else {
            sm_scores[base + j] = 0.0;
        }
    }
}

// kernel: attn_values
// out[b * width + c] = sum over t <= p of
// probs[(b * heads + h) * context + t] * v_cache[(b * context + t) * width + c].

struct AttnValuesParams {
    width: u32,
    head_dim: u32,
    context: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> av_probs: array<f32>;
@group(0) @binding(1) var<storage, read> av_v_cache: array<f32>;
@group(0) @binding(2) var<storage, read> av_pos: array<u32>;
@group(0) @binding(3) var<storage, read_write> av_out: array<f32>;
var<immediate> av: AttnValuesParams;

@compute @workgroup_size(64)
fn attn_values(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i >= av.batch * av.width) {
        return;
    }
    let heads = av.width / av.head_dim;
    let b = i / av.width;
    let c = i % av.width;
    let h = c / av.head_dim;
    let len = min(av_pos[b], av.context - 1u) + 1u;
    let p = (b * heads + h) * av.context;
    let v = b * av.context * av.width + c;
    var acc = 0.0;
    for (var t = 0u; t < len; t++) {
        acc += av_probs[p + t] * av_v_cache[v + t * av.width];
    }
    av_out[i] = acc;
}

// kernel: silu_mul
// gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i].

@group(0) @binding(0) var<storage, read_write> sm_gate: array<f32>;
@group(0) @binding(1) var<storage, read> sm_up: array<f32>;
var<immediate> silu_mul_n: u32;

@compute @workgroup_size(64)
fn silu_mul(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < silu_mul_n) {
        let g = sm_gate[i];
        sm_gate[i] = g / (1.0 + exp(-g)) * sm_up[i];
    }
}

// kernel: argmax
// The first index of each row's largest logit (NaN never wins) into
// tokens[b] and generated[b * context + p]; per row.

struct ArgmaxParams {
    vocab: u32,
    context: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read> am_logits: array<f32>;
@group(0) @binding(1) var<storage, read> am_pos: array<u32>;
@group(0) @binding(2) var<storage, read_write> am_tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> am_generated: array<u32>;
var<immediate> am: ArgmaxParams;

var<workgroup> am_value: array<f32, WORKGROUP>;
var<workgroup> am_index: array<u32, WORKGROUP>;

@compute @workgroup_size(64)
fn argmax(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let b = row_index(group, groups);
    if (b >= am.batch) {
        return;
    }
    let base = b * am.vocab;
    var best = lowest();
    var at = am.vocab;
    for (var j = t; j < am.vocab; j += WORKGROUP) {
        let v = am_logits[base + j];
        if (v > best) {
            best = v;
            at = j;
        }
    }
    am_value[t] = best;
    am_index[t] = at;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            let v = am_value[t + stride];
            let k = am_index[t + stride];
            if (v > am_value[t] || (v == am_value[t] && k < am_index[t])) {
                am_value[t] = v;
                am_index[t] = k;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        var token = am_index[0];
        if (token >= am.vocab) {
            token = 0u;
        }
        am_tokens[b] = token;
        am_generated[b * am.context + min(am_pos[b], am.context - 1u)] = token;
    }
}

// kernel: advance
// pos[b] = min(min(pos[b], context - 1) + 1, context - 1).

struct AdvanceParams {
    context: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read_write> adv_pos: array<u32>;
var<immediate> adv: AdvanceParams;

@compute @workgroup_size(64)
fn advance(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = element(group, groups, local);
    if (i < adv.batch) {
        let p = min(adv_pos[i], adv.context - 1u);
        adv_pos[i] = min(p + 1u, adv.context - 1u);
    }
}

// kernel: countdown
// counter[0] -= 1; flag[0] = counter[0] > 0 (a loop's flag, 1 or 0).

@group(0) @binding(0) var<storage, read_write> cd_counter: array<f32>;
@group(0) @binding(1) var<storage, read_write> cd_flag: array<u32>;

@compute @workgroup_size(64)
fn countdown(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    if (element(group, groups, local) == 0u) {
        let c = cd_counter[0] - 1.0;
        cd_counter[0] = c;
        cd_flag[0] = select(0u, 1u, c > 0.5);
    }
}

// kernel: settle
// A sequence that emitted the end token is done: its token and position
// are held there from then on. flag[0] = whether any sequence runs on.

struct SettleParams {
    end: u32,
    batch: u32,
}

@group(0) @binding(0) var<storage, read_write> st_tokens: array<u32>;
@group(0) @binding(1) var<storage, read_write> st_pos: array<u32>;
@group(0) @binding(2) var<storage, read_write> st_done: array<u32>;
@group(0) @binding(3) var<storage, read_write> st_held: array<u32>;
@group(0) @binding(4) var<storage, read_write> st_flag: array<u32>;
var<immediate> st: SettleParams;

@compute @workgroup_size(64)
fn settle(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    if (element(group, groups, local) != 0u) {
        return;
    }
    var running = 0u;
    for (var b = 0u; b < st.batch; b = b + 1u) {
        if (st_done[b] != 0u) {
            st_tokens[b] = st.end;
            st_pos[b] = st_held[b];
        } else if (st_tokens[b] == st.end) {
            st_done[b] = 1u;
            st_held[b] = st_pos[b];
        }
        if (st_done[b] == 0u) {
            running = 1u;
        }
    }
    st_flag[0] = running;
}
