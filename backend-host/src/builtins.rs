//! The four builtin kernels, built as ordinary host kernels.
//!
//! Each covers one element per thread,
//! `i = (group.y * groups.x + group.x) * 64 + t`, and leaves elements at or
//! past `n` (or past a buffer's end) alone, exactly as the GPU backends'
//! builtins do.

use capture_core::{Builtin, BuiltinInfo, DriverError};

use crate::kernels::{Group, Kernel, View};

/// The builtin `which`, as a host kernel.
pub(crate) fn build(which: Builtin) -> Result<Kernel, DriverError> {
    let signature = which.signature();
    let body = match which {
        Builtin::Fill => fill,
        Builtin::Add => add,
        Builtin::Copy => copy,
        Builtin::Axpy => axpy,
    };
    Kernel::new(signature, body)
        .map_err(|err| DriverError::new("host", "compile builtin", err.to_string()))
}

type Run = fn(&Group<'_>, &mut [View<'_>]) -> Result<(), String>;

fn decode(group: &Group<'_>) -> Result<(usize, f32), String> {
    let info = BuiltinInfo::from_bytes(group.info).ok_or("info shorter than 8 bytes")?;
    Ok((usize::try_from(info.n).unwrap_or(usize::MAX), info.scalar))
}

const _: [Run; 4] = [fill, add, copy, axpy];

fn fill(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let (n, value) = decode(group)?;
    let [out] = buffers else {
        return Err("fill binds one buffer".into());
    };
    let out = out.f32_mut()?;
    for i in group.elements_x(n.min(out.len())) {
        out[i] = value;
    }
    Ok(())
}

fn add(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let (n, _) = decode(group)?;
    let [x, y] = buffers else {
        return Err("add binds two buffers".into());
    };
    let (x, y) = (x.f32_mut()?, y.f32()?);
    for i in group.elements_x(n.min(x.len()).min(y.len())) {
        x[i] += y[i];
    }
    Ok(())
}

fn copy(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let (n, _) = decode(group)?;
    let [src, dst] = buffers else {
        return Err("copy binds two buffers".into());
    };
    let (src, dst) = (src.f32()?, dst.f32_mut()?);
    for i in group.elements_x(n.min(src.len()).min(dst.len())) {
        dst[i] = src[i];
    }
    Ok(())
}

fn axpy(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let (n, a) = decode(group)?;
    let [x, y] = buffers else {
        return Err("axpy binds two buffers".into());
    };
    let (x, y) = (x.f32()?, y.f32_mut()?);
    for i in group.elements_x(n.min(x.len()).min(y.len())) {
        // Unfused, as every backend computes it: a*x rounded, then added.
        let product = a * x[i];
        y[i] += product;
    }
    Ok(())
}
