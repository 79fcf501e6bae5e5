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
