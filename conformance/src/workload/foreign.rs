//! Foreign operations the scenarios and the model issue: other libraries'
//! work as each backend hands it over (the host's views, Vulkan's command
//! buffer), with one CPU meaning each.

use graph_capture::Access;

/// A foreign operation every backend with foreign operations can express
/// in its own terms.
#[derive(Debug, Clone, PartialEq)]
pub enum ForeignWork {
    /// `dst = src`, over the shorter of the two: `[src (read), dst (write)]`.
    Copy,
    /// Every element of `dst` set to the value: `[dst (write)]`.
    Fill(f32),
    /// The values written at the start of `dst`: `[dst (write)]`.
    Update(Vec<f32>),
    /// Returns an error instead of any work: `[dst (write)]`.
    Fail,
    /// Panics instead of any work: `[dst (write)]`.
    Panic,
    /// `y[b] = w x[b]` for a `rows x cols` row-major `w` and each of `batch`
    /// vectors, through a CPU GEMM (ndarray's, matrixmultiply underneath):
    /// `[w (read), x (read), y (write)]`.
    MatMul {
        /// Rows of `w`, elements of each `y[b]`.
        rows: u32,
        /// Columns of `w`, elements of each `x[b]`.
        cols: u32,
        /// Vectors.
        batch: u32,
    },
}

/// What the suite's deliberate panics start with, so that a panic hook can
/// keep them quiet (`support::quiet_deliberate_panics`).
pub const DELIBERATE: &str = "deliberate panic";

/// What [`ForeignWork::Fail`] says.
pub const FOREIGN_FAILURE: &str = "the foreign operation refuses";

impl ForeignWork {
    /// Its name, for its signature.
    pub fn name(&self) -> &'static str {
        match self {
            ForeignWork::Copy => "foreign_copy",
            ForeignWork::Fill(_) => "foreign_fill",
            ForeignWork::Update(_) => "foreign_update",
            ForeignWork::Fail => "foreign_fail",
            ForeignWork::Panic => "foreign_panic",
            ForeignWork::MatMul { .. } => "foreign_matmul",
        }
    }

    /// The buffers it declares, in order.
    pub fn accesses(&self) -> &'static [Access] {
        match self {
            ForeignWork::Copy => &[Access::Read, Access::Write],
            ForeignWork::MatMul { .. } => &[Access::Read, Access::Read, Access::Write],
            _ => &[Access::Write],
        }
    }

    /// Its meaning on the host: `buffers` in declaration order, as `f32`s.
    pub fn apply(&self, buffers: &mut [&mut [f32]]) -> Result<(), String> {
        match (self, buffers) {
            (ForeignWork::Copy, [src, dst]) => {
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
                Ok(())
            }
            (ForeignWork::Fill(value), [dst]) => {
                dst.fill(*value);
                Ok(())
            }
            (ForeignWork::Update(values), [dst]) => {
                let n = values.len().min(dst.len());
                dst[..n].copy_from_slice(&values[..n]);
                Ok(())
            }
            (&ForeignWork::MatMul { rows, cols, batch }, [w, x, y]) => {
                matmul([rows, cols, batch].map(|n| n as usize), w, x, y)
            }
            (ForeignWork::Fail, _) => Err(FOREIGN_FAILURE.into()),
            (ForeignWork::Panic, _) => {
                panic!("{DELIBERATE} in a foreign operation")
            }
            (work, buffers) => Err(format!(
                "{} given {} buffers, declared {}",
                work.name(),
                buffers.len(),
                work.accesses().len()
            )),
        }
    }
}

/// The runs of equal values among the first `n` of `values`: each run's
/// first index, length and bits, for a backend that writes an update as
/// one 32-bit fill per run (CUDA's and HIP's memsets).
pub fn equal_runs(values: &[f32], n: usize) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
    let values = &values[..n.min(values.len())];
    let mut at = 0;
    std::iter::from_fn(move || {
        let first = values.get(at)?.to_bits();
        let run = values[at..]
            .iter()
            .take_while(|v| v.to_bits() == first)
            .count();
        let found = (at, run, first);
        at += run;
        Some(found)
    })
}

/// A driver or runtime call's answer as a foreign operation's result: `Ok`
/// for 0, else an error naming the call and its code.
pub fn answered(call: &str, code: i32) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{call} answered {code}"))
    }
}

/// `y = x wᵀ` for `w` of `rows x cols`, `x` of `batch x cols`, `y` of
/// `batch x rows`, all row-major, through ndarray's GEMM.
fn matmul(
    [rows, cols, batch]: [usize; 3],
    w: &[f32],
    x: &[f32],
    y: &mut [f32],
) -> Result<(), String> {
    use ndarray::{ArrayView2, ArrayViewMut2};
    let part = |len: usize, n: usize, what: &str| {
        if n <= len {
            Ok(n)
        } else {
            Err(format!(
                "foreign_matmul needs {n} elements of {what}, it holds {len}"
            ))
        }
    };
    let (nw, nx, ny) = (
        part(w.len(), rows * cols, "w")?,
        part(x.len(), batch * cols, "x")?,
        part(y.len(), batch * rows, "y")?,
    );
    let shape = |e: ndarray::ShapeError| e.to_string();
    let w = ArrayView2::from_shape((rows, cols), &w[..nw]).map_err(shape)?;
    let x = ArrayView2::from_shape((batch, cols), &x[..nx]).map_err(shape)?;
    let mut y = ArrayViewMut2::from_shape((batch, rows), &mut y[..ny]).map_err(shape)?;
    ndarray::linalg::general_mat_mul(1.0, &x, &w.t(), 0.0, &mut y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_cover_the_values_in_order() {
        let values = [1.0, 1.0, 2.0, -0.0, 0.0, 0.0, 3.0];
        let runs: Vec<_> = equal_runs(&values, 6).collect();
        assert_eq!(
            runs,
            [
                (0, 2, 1.0f32.to_bits()),
                (2, 1, 2.0f32.to_bits()),
                (3, 1, (-0.0f32).to_bits()),
                (4, 2, 0.0f32.to_bits()),
            ]
        );
        assert_eq!(equal_runs(&values, 99).count(), 5);
        assert_eq!(equal_runs(&[], 3).count(), 0);
        assert_eq!(answered("f", 0), Ok(()));
        assert_eq!(answered("f", 2), Err("f answered 2".into()));
    }
}
