//! The workload's kernels as host closures.

use std::sync::Arc;

use graph_capture::host::{Device, DevicePage, Group, Host, Kernel, View};
use graph_capture::{Error, Signature};

use super::foreign::ForeignWork;
use super::transformer::host as transformer;
use super::{UserKernel, UserKernels};

type Body = fn(&Group<'_>, &mut [View<'_>]) -> Result<(), String>;

impl UserKernels for Host {
    const FOREIGN_FAILS_WHILE_RECORDING: bool = false;
    const FOREIGN_IN_BODIES: bool = true;

    /// The work itself, on the stream's worker, over the declared views.
    fn foreign_op(_device: &Arc<Device>, work: &ForeignWork) -> Option<Result<Kernel, Error>> {
        let work = work.clone();
        let accesses = work.accesses();
        Some(Kernel::foreign(work.name(), accesses, move |views| {
            // What it only reads, copied, so that every buffer is a slice.
            let mut reads = Vec::with_capacity(views.len());
            for (view, access) in views.iter().zip(accesses) {
                reads.push(if access.writes() {
                    Vec::new()
                } else {
                    view.f32()?.to_vec()
                });
            }
            let mut slices: Vec<&mut [f32]> = Vec::with_capacity(views.len());
            for ((view, access), read) in views.iter_mut().zip(accesses).zip(&mut reads) {
                slices.push(if access.writes() {
                    view.f32_mut()?
                } else {
                    read.as_mut_slice()
                });
            }
            work.apply(&mut slices)
        }))
    }

    fn foreign_page(
        device: &Arc<Device>,
        bytes: &[u8],
        keep_alive: Arc<()>,
    ) -> Option<Result<DevicePage, Error>> {
        Some(DevicePage::import(device, bytes, keep_alive).map_err(Error::from))
    }

    // Host kernels are safe Rust; the contract only matters on GPUs.
    #[allow(unsafe_code)]
    unsafe fn user_kernel(_device: &Arc<Device>, which: UserKernel) -> Result<Kernel, Error> {
        let body: Body = match which {
            UserKernel::RmsNorm => rmsnorm,
            UserKernel::MatVec => matvec,
            UserKernel::Silu => silu,
            UserKernel::Residual => residual,
            UserKernel::Scale => scale,
            UserKernel::Embed => transformer::embed,
            UserKernel::RmsNormRows => transformer::rmsnorm_rows,
            UserKernel::MatMul => transformer::matmul,
            UserKernel::Rope => transformer::rope,
            UserKernel::KvAppend => transformer::kv_append,
            UserKernel::AttnScores => transformer::attn_scores,
            UserKernel::AttnSoftmax => transformer::attn_softmax,
            UserKernel::AttnValues => transformer::attn_values,
            UserKernel::SiluMul => transformer::silu_mul,
            UserKernel::Argmax => transformer::argmax,
            UserKernel::Advance => transformer::advance,
            UserKernel::Countdown => countdown,
            UserKernel::Settle => transformer::settle,
            UserKernel::AddOne => add_one,
        };
        Kernel::new(which.signature(), body)
    }

    /// The host has no compiler: its build step is the signature check, so
    /// a kernel no backend could build (a workgroup of no threads) is what
    /// fails to compile here.
    fn broken_kernel(_device: &Arc<Device>) -> Result<Kernel, Error> {
        Kernel::new(Signature::new("broken").workgroup([0, 1, 1]), |_, _| Ok(()))
    }

    /// A closure takes whatever bindings it is given; its signature is the
    /// only statement of its interface, so there is nothing to disagree with.
    fn disagreeing_kernel(_device: &Arc<Device>) -> Option<Result<Kernel, Error>> {
        None
    }
}

fn rmsnorm(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (n, eps) = (params.u32()? as usize, params.f32()?);
    let [x, w, out] = buffers else {
        return Err("rmsnorm binds three buffers".into());
    };
    let (x, w, out) = (x.f32()?, w.f32()?, out.f32_mut()?);
    let n = n.min(x.len()).min(w.len()).min(out.len());
    let sum: f32 = x[..n].iter().map(|v| v * v).sum();
    let scale = 1.0 / (sum / n as f32 + eps).sqrt();
    for i in 0..n {
        out[i] = x[i] * scale * w[i];
    }
    Ok(())
}

fn matvec(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (rows, cols) = (params.u32()? as usize, params.u32()? as usize);
    let [w, x, y] = buffers else {
        return Err("matvec binds three buffers".into());
    };
    let (w, x, y) = (w.f32()?, x.f32()?, y.f32_mut()?);
    if x.len() < cols {
        return Err(format!("x holds {} of {cols} columns", x.len()));
    }
    for r in group.elements_x(rows.min(y.len())) {
        let row = w
            .get(r * cols..(r + 1) * cols)
            .ok_or_else(|| format!("row {r} lies past the matrix"))?;
        let mut acc = 0.0f32;
        for (a, b) in row.iter().zip(&x[..cols]) {
            acc += a * b;
        }
        y[r] = acc;
    }
    Ok(())
}

fn silu(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let n = group.params().u32()? as usize;
    let [x] = buffers else {
        return Err("silu binds one buffer".into());
    };
    let x = x.f32_mut()?;
    for i in group.elements_x(n.min(x.len())) {
        let v = x[i];
        x[i] = v / (1.0 + (-v).exp());
    }
    Ok(())
}

fn residual(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let n = group.params().u32()? as usize;
    let [x, y] = buffers else {
        return Err("residual binds two buffers".into());
    };
    let (x, y) = (x.f32_mut()?, y.f32()?);
    for i in group.elements_x(n.min(x.len()).min(y.len())) {
        x[i] += y[i];
    }
    Ok(())
}

fn add_one(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let n = group.params().u32()? as usize;
    let [input, output] = buffers else {
        return Err("add_one binds two buffers".into());
    };
    let (input, output) = (input.f32()?, output.f32_mut()?);
    for i in group.elements_x(n.min(input.len()).min(output.len())) {
        output[i] = input[i] + 1.0;
    }
    Ok(())
}

fn countdown(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let [counter, flag] = buffers else {
        return Err("countdown binds two buffers".into());
    };
    if group.elements_x(1).is_empty() {
        return Ok(());
    }
    let counter = counter.f32_mut()?;
    let flag = flag.u32_mut()?;
    let (Some(c), Some(f)) = (counter.first_mut(), flag.first_mut()) else {
        return Err("countdown needs one counter and one flag".into());
    };
    *c -= 1.0;
    *f = u32::from(*c > 0.5);
    Ok(())
}

fn scale(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (n, a, b) = (params.u32()? as usize, params.f32()?, params.f32()?);
    let [x] = buffers else {
        return Err("scale binds one buffer".into());
    };
    let x = x.f32_mut()?;
    for i in group.elements_x(n.min(x.len())) {
        let product = x[i] * a;
        x[i] = product + b;
    }
    Ok(())
}
