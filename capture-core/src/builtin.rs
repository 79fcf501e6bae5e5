//! The four kernels every backend ships, so that one conformance suite and one
//! set of benches can run unchanged on all of them.
//!
//! All operate on `f32` arrays and read their element count (and scalar) from
//! the launch's info bytes, laid out as [`BuiltinInfo`]. Kernels index
//! element `i = global_id.x + global_id.y * groups.x * WORKGROUP_SIZE` and do
//! nothing where `i >= n`, so a launch may use [`groups_for`]'s grid for any
//! `n`.

use std::sync::Arc;

use crate::driver::{Access, Driver, DriverError};
use crate::kernels::signature::Signature;

/// Threads per workgroup (CUDA block) of every builtin kernel.
pub const WORKGROUP_SIZE: u32 = 64;

/// Most workgroups one grid dimension may hold on every backend.
pub const MAX_GROUPS_PER_DIM: u32 = 65_535;

/// One of the four builtin kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `out[i] = value`. Bindings: `[out (write)]`.
    Fill,
    /// `x[i] += y[i]`. Bindings: `[x (read-write), y (read)]`.
    Add,
    /// `dst[i] = src[i]`. Bindings: `[src (read), dst (write)]`.
    Copy,
    /// `y[i] += a * x[i]`. Bindings: `[x (read), y (read-write)]`.
    Axpy,
}

impl Builtin {
    /// Every builtin, in a fixed order.
    pub const ALL: [Builtin; 4] = [Builtin::Fill, Builtin::Add, Builtin::Copy, Builtin::Axpy];

    /// The builtin's position in [`Builtin::ALL`]: the slot a backend's
    /// per-device table of compiled kernels keeps it in.
    pub fn index(self) -> usize {
        match self {
            Builtin::Fill => 0,
            Builtin::Add => 1,
            Builtin::Copy => 2,
            Builtin::Axpy => 3,
        }
    }

    /// How the kernel uses each of its bindings, in binding order.
    pub fn accesses(self) -> &'static [Access] {
        match self {
            Builtin::Fill => &[Access::Write],
            Builtin::Add => &[Access::ReadWrite, Access::Read],
            Builtin::Copy => &[Access::Read, Access::Write],
            Builtin::Axpy => &[Access::Read, Access::ReadWrite],
        }
    }

    /// The kernel's signature, the same on every backend: its bindings,
    /// [`BuiltinInfo::SIZE`] info bytes, no by-value parameters, and
    /// [`WORKGROUP_SIZE`] threads per workgroup.
    pub fn signature(self) -> Signature {
        Signature::new(self.name())
            .bindings(self.accesses())
            .info(BuiltinInfo::SIZE as u32)
            .workgroup([WORKGROUP_SIZE, 1, 1])
    }

    /// The kernel's name in every backend's sources.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Fill => "fill",
            Builtin::Add => "add",
            Builtin::Copy => "copy",
            Builtin::Axpy => "axpy",
        }
    }
}

/// A backend's compiled builtin kernels.
///
/// Each backend builds them through its own user-kernel path, from its own
/// sources, with [`Builtin::signature`]. Their kernels trust the element
/// count in their info, so the client launches them only through
/// [`Client::run_builtin`](crate::Client::run_builtin), which checks it
/// against the buffers.
pub trait Builtins: Driver {
    /// Compile (or fetch from the backend's cache) `which` for `device`.
    fn builtin(device: &Arc<Self::Device>, which: Builtin) -> Result<Self::Kernel, DriverError>;
}

/// The info bytes of a builtin launch: 16 bytes, little-endian, so that every
/// backend's alignment rules for a uniform or storage binding hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuiltinInfo {
    /// Number of elements the launch covers.
    pub n: u32,
    /// `value` for `fill`, `a` for `axpy`; ignored by the others.
    pub scalar: f32,
}

impl BuiltinInfo {
    /// Size of the encoded form.
    pub const SIZE: usize = 16;

    /// The info for `n` elements and `scalar`.
    pub fn new(n: u32, scalar: f32) -> Self {
        Self { n, scalar }
    }

    /// The bytes a launch carries: `n`, `scalar`, then 8 zero bytes.
    #[inline]
    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..4].copy_from_slice(&self.n.to_le_bytes());
        out[4..8].copy_from_slice(&self.scalar.to_le_bytes());
        out
    }

    /// Decode info bytes; `None` when they are too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let n = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
        let scalar = f32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
        Some(Self { n, scalar })
    }
}

/// The grid that covers `n` elements with [`WORKGROUP_SIZE`]-thread groups,
/// spilling into y past [`MAX_GROUPS_PER_DIM`].
#[inline]
pub fn groups_for(n: u32) -> [u32; 3] {
    let groups = n.div_ceil(WORKGROUP_SIZE).max(1);
    if groups <= MAX_GROUPS_PER_DIM {
        // No division on the common path: a launch's grid is computed on
        // every eager launch.
        return [groups, 1, 1];
    }
    [MAX_GROUPS_PER_DIM, groups.div_ceil(MAX_GROUPS_PER_DIM), 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trips() {
        let info = BuiltinInfo::new(1234, -2.5);
        assert_eq!(BuiltinInfo::from_bytes(&info.to_bytes()), Some(info));
        assert_eq!(BuiltinInfo::from_bytes(&[1, 2, 3]), None);
    }

    #[test]
    fn signatures_follow_the_accesses() {
        for which in Builtin::ALL {
            let sig = which.signature();
            assert_eq!(sig.name(), which.name());
            assert_eq!(sig.accesses(), which.accesses());
            assert_eq!(sig.info_bytes(), 16);
            assert_eq!(sig.param_bytes(), 0);
            assert_eq!(sig.workgroup_size(), [WORKGROUP_SIZE, 1, 1]);
            assert!(sig.validate().is_ok());
        }
    }

    #[test]
    fn names_are_the_kernels_every_backends_sources_define() {
        let names = Builtin::ALL.map(Builtin::name);
        assert_eq!(names, ["fill", "add", "copy", "axpy"]);
    }

    #[test]
    fn index_is_the_position_in_all() {
        for (position, which) in Builtin::ALL.iter().enumerate() {
            assert_eq!(which.index(), position);
        }
    }

    #[test]
    fn grid_covers_every_element() {
        for n in [
            0u32,
            1,
            63,
            64,
            65,
            64 * 65_535,
            64 * 65_535 + 1,
            10_000_000,
        ] {
            let [x, y, z] = groups_for(n);
            assert!(x >= 1 && y >= 1 && z == 1);
            assert!(x <= MAX_GROUPS_PER_DIM && y <= MAX_GROUPS_PER_DIM);
            assert!(u64::from(x) * u64::from(y) * u64::from(WORKGROUP_SIZE) >= u64::from(n));
        }
    }
}
