//! The four builtin kernels as Rust functions over `f32` slices.

use capture_core::{Builtin, BuiltinInfo};

/// A compiled kernel of the host backend: which builtin it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostKernel(pub Builtin);

fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn to_bytes(values: &[f32], out: &mut [u8]) {
    for (chunk, value) in out.chunks_exact_mut(4).zip(values) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
}

/// Run `kernel` over the bound buffers' bytes, as a GPU would: elements past
/// a buffer's end or past `n` are left alone.
///
/// Returns an error when the info bytes are malformed or a binding is
/// missing, which a GPU would turn into a fault.
pub(crate) fn run(kernel: HostKernel, info: &[u8], buffers: &mut [Vec<u8>]) -> Result<(), String> {
    let info = BuiltinInfo::from_bytes(info).ok_or("info bytes shorter than 8")?;
    let expected = kernel.0.accesses().len();
    if buffers.len() != expected {
        return Err(format!(
            "{} binds {expected} buffers, launch bound {}",
            kernel.0.name(),
            buffers.len()
        ));
    }
    let n = usize::try_from(info.n).unwrap_or(usize::MAX);
    let mut values: Vec<Vec<f32>> = buffers.iter().map(|b| to_f32(b)).collect();
    match kernel.0 {
        Builtin::Fill => {
            for v in values[0].iter_mut().take(n) {
                *v = info.scalar;
            }
        }
        Builtin::Add => {
            let (x, y) = values.split_at_mut(1);
            for (x, y) in x[0].iter_mut().zip(&y[0]).take(n) {
                *x += *y;
            }
        }
        Builtin::Copy => {
            let (src, dst) = values.split_at_mut(1);
            for (d, s) in dst[0].iter_mut().zip(&src[0]).take(n) {
                *d = *s;
            }
        }
        Builtin::Axpy => {
            let (x, y) = values.split_at_mut(1);
            for (y, x) in y[0].iter_mut().zip(&x[0]).take(n) {
                *y += info.scalar * *x;
            }
        }
    }
    for ((bytes, values), access) in buffers.iter_mut().zip(&values).zip(kernel.0.accesses()) {
        if access.writes() {
            to_bytes(values, bytes);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn each_builtin_computes_its_formula_up_to_n() {
        let info = BuiltinInfo::new(2, 3.0).to_bytes();
        let mut fill = vec![bytes(&[0.0; 3])];
        run(HostKernel(Builtin::Fill), &info, &mut fill).expect("runs");
        assert_eq!(to_f32(&fill[0]), [3.0, 3.0, 0.0]);

        let mut add = vec![bytes(&[1.0, 2.0, 3.0]), bytes(&[10.0, 20.0, 30.0])];
        run(HostKernel(Builtin::Add), &info, &mut add).expect("runs");
        assert_eq!(to_f32(&add[0]), [11.0, 22.0, 3.0]);

        let mut copy = vec![bytes(&[5.0, 6.0]), bytes(&[0.0, 0.0])];
        run(HostKernel(Builtin::Copy), &info, &mut copy).expect("runs");
        assert_eq!(to_f32(&copy[1]), [5.0, 6.0]);

        let mut axpy = vec![bytes(&[1.0, 2.0]), bytes(&[1.0, 1.0])];
        run(HostKernel(Builtin::Axpy), &info, &mut axpy).expect("runs");
        assert_eq!(to_f32(&axpy[1]), [4.0, 7.0]);
    }

    #[test]
    fn malformed_launches_are_errors() {
        assert!(run(HostKernel(Builtin::Fill), &[1], &mut []).is_err());
        let info = BuiltinInfo::new(1, 0.0).to_bytes();
        assert!(run(HostKernel(Builtin::Add), &info, &mut [vec![0; 4]]).is_err());
    }
}
