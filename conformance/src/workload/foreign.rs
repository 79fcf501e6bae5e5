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
}

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
        }
    }

    /// The buffers it declares, in order.
    pub fn accesses(&self) -> &'static [Access] {
        match self {
            ForeignWork::Copy => &[Access::Read, Access::Write],
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
            (ForeignWork::Fail, _) => Err(FOREIGN_FAILURE.into()),
            (ForeignWork::Panic, _) => {
                panic!("{} in a foreign operation", crate::support::DELIBERATE)
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
