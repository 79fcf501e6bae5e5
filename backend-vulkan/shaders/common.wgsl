// Shared by every builtin kernel; build.rs puts it in front of each.

// The launch's info bytes: element count, scalar, padding to 16 bytes.
struct Info {
    n: u32,
    scalar: f32,
    pad0: u32,
    pad1: u32,
}

// The element an invocation handles: grids spill into y past 65,535
// workgroups, each of 64 invocations.
fn element(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * 64u;
}
