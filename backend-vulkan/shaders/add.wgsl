// x[i] += y[i]. Bindings: x (read-write), y (read), info.

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> info: Info;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(gid, groups);
    if (i >= info.n) {
        return;
    }
    x[i] = x[i] + y[i];
}
