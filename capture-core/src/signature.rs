//! What a compiled kernel takes, so that every launch can be checked against
//! it once, in the core, for every backend.
//!
//! A kernel's [`Signature`] is its contract with the caller: the ordered
//! access of each buffer binding, the exact number of info bytes it reads
//! (0 for a kernel that reads none), the size of each by-value parameter
//! (CUDA/HIP kernel parameters, Vulkan push constants, a host closure's
//! arguments) and its workgroup size. Backends store it in their kernel type
//! and hand it out through [`Driver::signature`](crate::Driver::signature);
//! the access of each binding comes from it, never from the caller, so what
//! a launch writes (its failure claims, a graph's written set, Vulkan's
//! barriers) cannot be misstated.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::ids::BufferId;

/// Most buffers one kernel may bind.
pub const MAX_BINDINGS: usize = 16;

/// Longest info payload a kernel may read.
pub const MAX_INFO_BYTES: u32 = 256;

/// Most bytes of by-value parameters a kernel may take: the push-constant
/// size every Vulkan device offers (`maxPushConstantsSize` is at least 128),
/// well under CUDA's and HIP's 4 KiB of kernel parameters.
pub const MAX_PARAM_BYTES: u32 = 128;

/// Most threads one workgroup may hold on every backend (Vulkan guarantees
/// at least 128 invocations; CUDA and HIP allow 1024, which the backends
/// check against the device's own limit when they compile).
pub const MAX_WORKGROUP_THREADS: u32 = 1024;

/// How a kernel uses one of its buffers.
///
/// capture-core needs this to know what a launch writes (what a failure
/// claims, what a graph's replay rewrites) and what it reads (what a claimed
/// input poisons); a backend may also use it to place no more barriers than
/// the accesses need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only.
    Read,
    /// Written without being read first.
    Write,
    /// Read and written.
    ReadWrite,
}

impl Access {
    /// Whether the kernel reads the buffer.
    #[inline]
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    /// Whether the kernel writes the buffer.
    #[inline]
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// A kernel's bindings, info size, by-value parameters and workgroup size.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    name: Arc<str>,
    /// A plain vector: every launch reads it, and a small vector's inline
    /// or spilled test would be paid on each read.
    bindings: Vec<Access>,
    info_bytes: u32,
    params: SmallVec<[u32; 4]>,
    /// The sum of `params`, kept so that a launch's check adds nothing up.
    param_total: u32,
    workgroup: [u32; 3],
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        let mut first = true;
        for access in &self.bindings {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{}", access.short())?;
        }
        if self.info_bytes > 0 {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "info {} B", self.info_bytes)?;
        }
        for size in &self.params {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "param {size} B")?;
        }
        let [x, y, z] = self.workgroup;
        write!(f, ") workgroup {x}x{y}x{z}")
    }
}

impl Signature {
    /// A kernel named `name` (its entry point, for messages) with no
    /// bindings, no info, no parameters and a workgroup of 64 threads.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: Arc::from(name.into()),
            bindings: Vec::new(),
            info_bytes: 0,
            params: SmallVec::new(),
            param_total: 0,
            workgroup: [64, 1, 1],
        }
    }

    /// Add a buffer binding, after the ones already declared.
    pub fn binding(mut self, access: Access) -> Self {
        self.bindings.push(access);
        self
    }

    /// Add buffer bindings, in order.
    pub fn bindings(mut self, accesses: &[Access]) -> Self {
        self.bindings.extend_from_slice(accesses);
        self
    }

    /// The kernel reads exactly `bytes` info bytes from a device buffer
    /// bound after the others.
    pub fn info(mut self, bytes: u32) -> Self {
        self.info_bytes = bytes;
        self
    }

    /// Add a by-value parameter of `bytes` bytes, after the ones already
    /// declared.
    pub fn param(mut self, bytes: u32) -> Self {
        self.params.push(bytes);
        self.param_total = self.param_total.saturating_add(bytes);
        self
    }

    /// Threads per workgroup (CUDA block) in x, y and z.
    pub fn workgroup(mut self, size: [u32; 3]) -> Self {
        self.workgroup = size;
        self
    }

    /// The kernel's name.
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel's name, shared: what a graph's log keeps of each launch
    /// without copying the text.
    pub fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// How the kernel uses each binding, in binding order.
    #[inline]
    pub fn accesses(&self) -> &[Access] {
        &self.bindings
    }

    /// Info bytes every launch must pass (0: the kernel reads none).
    #[inline]
    pub fn info_bytes(&self) -> u32 {
        self.info_bytes
    }

    /// The size of each by-value parameter, in order.
    #[inline]
    pub fn param_sizes(&self) -> &[u32] {
        &self.params
    }

    /// Bytes of by-value parameters every launch must pass: the sizes of
    /// [`Signature::param_sizes`], packed in order without padding.
    #[inline]
    pub fn param_bytes(&self) -> u32 {
        self.param_total
    }

    /// Threads per workgroup in x, y and z.
    #[inline]
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.workgroup
    }

    /// Threads in one workgroup.
    pub fn threads(&self) -> u64 {
        self.workgroup.iter().map(|&d| u64::from(d)).product()
    }

    /// Whether a backend can build a kernel with this signature: the limits
    /// every backend shares. Backends call it before compiling and add their
    /// device's own limits.
    ///
    /// # Errors
    ///
    /// A sentence naming the limit the signature breaks.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("a kernel needs a name (its entry point)".into());
        }
        if self.bindings.len() > MAX_BINDINGS {
            return Err(format!(
                "{} binds {} buffers; a kernel may bind at most {MAX_BINDINGS}",
                self.name,
                self.bindings.len()
            ));
        }
        if self.info_bytes > MAX_INFO_BYTES {
            return Err(format!(
                "{} reads {} info bytes; at most {MAX_INFO_BYTES}",
                self.name, self.info_bytes
            ));
        }
        if let Some(bad) = self.params.iter().find(|&&s| !matches!(s, 1 | 2 | 4 | 8)) {
            return Err(format!(
                "{} declares a {bad}-byte parameter; parameters are 1, 2, 4 or 8 bytes",
                self.name
            ));
        }
        if self.param_bytes() > MAX_PARAM_BYTES {
            return Err(format!(
                "{} takes {} parameter bytes; at most {MAX_PARAM_BYTES}",
                self.name,
                self.param_bytes()
            ));
        }
        if self.workgroup.contains(&0) || self.threads() > u64::from(MAX_WORKGROUP_THREADS) {
            let [x, y, z] = self.workgroup;
            return Err(format!(
                "{} has a workgroup of {x}x{y}x{z}; each size must be at least 1 and \
                 the product at most {MAX_WORKGROUP_THREADS}",
                self.name
            ));
        }
        Ok(())
    }
}

impl Signature {
    /// Whether a launch over `buffers` (in binding order) with `info` and
    /// `params` bytes and `groups` workgroups matches this signature on a
    /// device that allows `max_groups`.
    ///
    /// # Errors
    ///
    /// A sentence naming the first thing that does not match, which the
    /// server reports as [`Error::KernelMismatch`](crate::Error::KernelMismatch).
    pub fn check_launch(
        &self,
        groups: [u32; 3],
        max_groups: [u32; 3],
        buffers: &[BufferId],
        info: usize,
        params: usize,
    ) -> Result<(), String> {
        self.check_launch_of(groups, max_groups, buffers, |id| *id, info, params)
    }

    /// [`Signature::check_launch`] over any binding type, `id` naming each
    /// binding's buffer: the server checks its own buffer references without
    /// collecting their ids first. Every branch but the last is a compare
    /// of two numbers; the sentences are built only on a mismatch.
    #[inline]
    pub(crate) fn check_launch_of<B>(
        &self,
        groups: [u32; 3],
        max_groups: [u32; 3],
        buffers: &[B],
        id: impl Fn(&B) -> BufferId,
        info: usize,
        params: usize,
    ) -> Result<(), String> {
        let declared = self.bindings.as_slice();
        if buffers.len() != declared.len() {
            return Err(self.arity_mismatch(buffers.len()));
        }
        if info != self.info_bytes as usize {
            return Err(self.info_mismatch(info));
        }
        let expected = self.param_bytes();
        if params != expected as usize {
            return Err(param_mismatch(expected, params));
        }
        let [x, y, z] = groups;
        let [mx, my, mz] = max_groups;
        if x == 0 || y == 0 || z == 0 || x > mx || y > my || z > mz {
            return Err(grid_mismatch(groups, max_groups));
        }
        // Only a pair with a written side may alias: compare each written
        // binding with every other.
        for (i, access) in declared.iter().enumerate() {
            if !access.writes() {
                continue;
            }
            let a = id(&buffers[i]);
            let aliased = buffers
                .iter()
                .enumerate()
                .any(|(j, b)| j != i && id(b) == a);
            if aliased {
                let ids: SmallVec<[BufferId; 8]> = buffers.iter().map(&id).collect();
                return Err(self.alias_mismatch(&ids));
            }
        }
        Ok(())
    }

    #[cold]
    fn arity_mismatch(&self, bound: usize) -> String {
        format!(
            "it binds {} buffer(s), the launch bound {bound}",
            self.bindings.len()
        )
    }

    #[cold]
    fn info_mismatch(&self, info: usize) -> String {
        format!(
            "it reads {} info bytes, the launch passed {info}",
            self.info_bytes
        )
    }

    /// The first aliased pair of `buffers` with a written side, in binding
    /// order.
    #[cold]
    fn alias_mismatch(&self, buffers: &[BufferId]) -> String {
        for (i, (&a, &access_a)) in buffers.iter().zip(&self.bindings).enumerate() {
            for (j, (&b, &access_b)) in buffers.iter().zip(&self.bindings).enumerate().skip(i + 1) {
                if a == b && (access_a.writes() || access_b.writes()) {
                    return format!(
                        "{a} is bound at {i} ({}) and {j} ({}); a written buffer may be \
                         bound only once",
                        access_a.short(),
                        access_b.short()
                    );
                }
            }
        }
        "a written buffer is bound twice".into()
    }
}

#[cold]
fn param_mismatch(expected: u32, params: usize) -> String {
    format!("it takes {expected} parameter bytes, the launch passed {params}")
}

#[cold]
fn grid_mismatch(groups: [u32; 3], max_groups: [u32; 3]) -> String {
    format!("a grid of {groups:?} workgroups; each dimension must be 1 to {max_groups:?}")
}

impl Access {
    fn short(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "read-write",
        }
    }
}

/// By-value parameters of one launch, packed in declaration order: what
/// [`Client::launch`](crate::Client::launch) takes as `params`.
///
/// ```
/// use capture_core::Params;
/// // For `__global__ void scale(float* x, unsigned n, float a)`:
/// let params = Params::new().u32(1024).f32(0.5);
/// assert_eq!(params.as_bytes().len(), 8);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    bytes: SmallVec<[u8; 32]>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a `u32`.
    pub fn u32(mut self, value: u32) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Append an `i32`.
    pub fn i32(mut self, value: i32) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Append an `f32`.
    pub fn f32(mut self, value: f32) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Append a `u64`.
    pub fn u64(mut self, value: u64) -> Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// The packed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_describes_itself() {
        let sig = Signature::new("scale")
            .binding(Access::ReadWrite)
            .binding(Access::Read)
            .info(16)
            .param(4)
            .param(8)
            .workgroup([32, 2, 1]);
        assert_eq!(sig.name(), "scale");
        assert_eq!(sig.accesses(), &[Access::ReadWrite, Access::Read]);
        assert_eq!(sig.info_bytes(), 16);
        assert_eq!(sig.param_sizes(), &[4, 8]);
        assert_eq!(sig.param_bytes(), 12);
        assert_eq!(sig.workgroup_size(), [32, 2, 1]);
        assert_eq!(sig.threads(), 64);
        assert!(sig.validate().is_ok());
        assert_eq!(
            sig.to_string(),
            "scale(read-write, read, info 16 B, param 4 B, param 8 B) workgroup 32x2x1"
        );
        assert_eq!(
            Signature::new("k").workgroup([1, 1, 1]).to_string(),
            "k() workgroup 1x1x1"
        );
        assert_eq!(
            Signature::new("k").param(4).to_string(),
            "k(param 4 B) workgroup 64x1x1"
        );
        assert_eq!(
            format!("{sig:?}"),
            sig.to_string(),
            "Debug reads as Display"
        );
    }

    #[test]
    fn refuses_what_no_backend_can_build() {
        let ok = Signature::new("k").binding(Access::Read);
        assert!(ok.validate().is_ok());
        assert!(Signature::new("").validate().is_err());
        let many = Signature::new("k").bindings(&[Access::Read; MAX_BINDINGS + 1]);
        assert!(many.validate().unwrap_err().contains("at most 16"));
        assert!(
            Signature::new("k")
                .bindings(&[Access::Read; MAX_BINDINGS])
                .validate()
                .is_ok()
        );
        assert!(Signature::new("k").info(MAX_INFO_BYTES).validate().is_ok());
        assert!(
            Signature::new("k")
                .info(MAX_INFO_BYTES + 1)
                .validate()
                .is_err()
        );
        assert!(Signature::new("k").param(3).validate().is_err());
        assert!(Signature::new("k").param(0).validate().is_err());
        for size in [1, 2, 4, 8] {
            assert!(Signature::new("k").param(size).validate().is_ok());
        }
        let full = (0..16).fold(Signature::new("k"), |s, _| s.param(8));
        assert!(full.validate().is_ok());
        assert!(full.param(1).validate().is_err());
        assert!(Signature::new("k").workgroup([0, 1, 1]).validate().is_err());
        assert!(
            Signature::new("k")
                .workgroup([1024, 1, 1])
                .validate()
                .is_ok()
        );
        assert!(
            Signature::new("k")
                .workgroup([1024, 2, 1])
                .validate()
                .is_err()
        );
        assert!(
            Signature::new("k")
                .workgroup([32, 32, 1])
                .validate()
                .is_ok()
        );
    }

    fn mismatch(result: Result<(), String>) -> String {
        match result {
            Err(reason) => reason,
            Ok(()) => panic!("expected a mismatch"),
        }
    }

    #[test]
    fn launches_are_checked_against_the_signature() {
        let sig = Signature::new("k")
            .binding(Access::Read)
            .binding(Access::Write)
            .info(16)
            .param(4);
        let max = [100, 10, 1];
        let (a, b) = (BufferId(1), BufferId(2));
        assert!(sig.check_launch([1, 1, 1], max, &[a, b], 16, 4).is_ok());
        assert!(sig.check_launch([100, 10, 1], max, &[a, b], 16, 4).is_ok());
        let arity = mismatch(sig.check_launch([1, 1, 1], max, &[a], 16, 4));
        assert!(
            arity.contains("2 buffer(s)") && arity.contains("bound 1"),
            "{arity}"
        );
        assert!(sig.check_launch([1, 1, 1], max, &[a, b, a], 16, 4).is_err());
        let info = mismatch(sig.check_launch([1, 1, 1], max, &[a, b], 4, 4));
        assert!(
            info.contains("16 info bytes") && info.contains("passed 4"),
            "{info}"
        );
        assert!(sig.check_launch([1, 1, 1], max, &[a, b], 17, 4).is_err());
        let params = mismatch(sig.check_launch([1, 1, 1], max, &[a, b], 16, 0));
        assert!(params.contains("4 parameter bytes"), "{params}");
        assert!(sig.check_launch([1, 1, 1], max, &[a, b], 16, 5).is_err());
        for grid in [
            [0, 1, 1],
            [1, 0, 1],
            [1, 1, 0],
            [101, 1, 1],
            [1, 11, 1],
            [1, 1, 2],
        ] {
            let grid_err = mismatch(sig.check_launch(grid, max, &[a, b], 16, 4));
            assert!(grid_err.contains("grid"), "{grid_err}");
        }
        let alias = mismatch(sig.check_launch([1, 1, 1], max, &[a, a], 16, 4));
        assert!(alias.contains("bound at 0 (read) and 1 (write)"), "{alias}");
    }

    #[test]
    fn only_written_buffers_may_not_alias() {
        let reads = Signature::new("k").bindings(&[Access::Read, Access::Read, Access::Read]);
        let a = BufferId(1);
        assert!(
            reads
                .check_launch([1, 1, 1], [1, 1, 1], &[a, a, a], 0, 0)
                .is_ok()
        );
        for written in [Access::Write, Access::ReadWrite] {
            for position in 0..3 {
                let mut accesses = [Access::Read; 3];
                accesses[position] = written;
                let sig = Signature::new("k").bindings(&accesses);
                let b = BufferId(2);
                // The written one aliased with either of the others.
                let mut ids = [b, b, b];
                ids[position] = a;
                assert!(sig.check_launch([1, 1, 1], [1, 1, 1], &ids, 0, 0).is_ok());
                ids[(position + 1) % 3] = a;
                assert!(sig.check_launch([1, 1, 1], [1, 1, 1], &ids, 0, 0).is_err());
            }
        }
    }

    #[test]
    fn two_written_bindings_may_not_alias() {
        let sig = Signature::new("k").bindings(&[Access::Write, Access::Read, Access::ReadWrite]);
        let (a, b) = (BufferId(1), BufferId(2));
        let max = [1, 1, 1];
        assert!(sig.check_launch(max, max, &[a, b, b], 0, 0).is_err());
        let both = mismatch(sig.check_launch(max, max, &[a, b, a], 0, 0));
        assert!(
            both.contains("bound at 0 (write) and 2 (read-write)"),
            "{both}"
        );
        assert!(
            sig.check_launch(max, max, &[a, b, BufferId(3)], 0, 0)
                .is_ok()
        );
    }

    #[test]
    fn param_bytes_add_up_as_declared() {
        let sig = Signature::new("k").param(4).param(8).param(1);
        assert_eq!(sig.param_bytes(), 13);
        assert!(sig.check_launch([1, 1, 1], [1, 1, 1], &[], 0, 13).is_ok());
        assert!(sig.check_launch([1, 1, 1], [1, 1, 1], &[], 0, 12).is_err());
    }

    #[test]
    fn params_pack_in_order() {
        let params = Params::new().u32(7).f32(1.5).i32(-1).u64(9);
        let mut expected = Vec::new();
        expected.extend_from_slice(&7u32.to_le_bytes());
        expected.extend_from_slice(&1.5f32.to_le_bytes());
        expected.extend_from_slice(&(-1i32).to_le_bytes());
        expected.extend_from_slice(&9u64.to_le_bytes());
        assert_eq!(params.as_bytes(), expected.as_slice());
        assert!(Params::new().as_bytes().is_empty());
    }
}
