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
use crate::kernels::span::Span;

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
    /// The pairs of bindings (among the first [`MAX_BINDINGS`]) that must
    /// name two buffers, a written side in each: what a launch compares,
    /// without walking the accesses to find them.
    exclusive: Vec<[u8; 2]>,
    info_bytes: u32,
    params: SmallVec<[u32; 4]>,
    /// The sum of `params`, kept so that a launch's check adds nothing up.
    param_total: u32,
    workgroup: [u32; 3],
    /// A foreign operation's: the caller's own commands over the bindings,
    /// not a kernel of ours (see [`Signature::foreign`]).
    foreign: bool,
}

/// A launch as its signature checks it: its grid, the device's largest,
/// its buffers in binding order, and its info and parameter byte counts.
pub(crate) struct LaunchShape<'a, B> {
    pub(crate) groups: [u32; 3],
    pub(crate) max_groups: [u32; 3],
    pub(crate) buffers: &'a [B],
    pub(crate) info: usize,
    pub(crate) params: usize,
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.foreign {
            write!(f, "foreign ")?;
        }
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
            exclusive: Vec::new(),
            info_bytes: 0,
            params: SmallVec::new(),
            param_total: 0,
            workgroup: [64, 1, 1],
            foreign: false,
        }
    }

    /// A foreign operation named `name` over buffers of `accesses`, in
    /// order: work of another library (a GEMM, a collective, a caller's own
    /// commands) that the core treats as a launch over those accesses. It
    /// has no grid, info or parameters; `Client::foreign` issues it.
    pub fn foreign(name: impl Into<String>, accesses: &[Access]) -> Self {
        let mut signature = Self::new(name).bindings(accesses).workgroup([1, 1, 1]);
        signature.foreign = true;
        signature
    }

    /// Whether this is a foreign operation's signature.
    #[inline]
    pub fn is_foreign(&self) -> bool {
        self.foreign
    }

    /// Add a buffer binding, after the ones already declared.
    pub fn binding(mut self, access: Access) -> Self {
        self.push_binding(access);
        self
    }

    /// Add buffer bindings, in order.
    pub fn bindings(mut self, accesses: &[Access]) -> Self {
        for &access in accesses {
            self.push_binding(access);
        }
        self
    }

    fn push_binding(&mut self, access: Access) {
        let at = self.bindings.len();
        if at < MAX_BINDINGS {
            // Both fit in a byte: at most `MAX_BINDINGS` (16).
            let pairs = self.bindings.iter().enumerate();
            let exclusive = pairs.filter(|(_, earlier)| access.writes() || earlier.writes());
            self.exclusive
                .extend(exclusive.map(|(earlier, _)| [earlier as u8, at as u8]));
        }
        self.bindings.push(access);
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
        if self.foreign && (self.info_bytes > 0 || !self.params.is_empty()) {
            return Err(format!(
                "{} is a foreign operation, which takes no info bytes or parameters",
                self.name
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
        let launch = LaunchShape {
            groups,
            max_groups,
            buffers,
            info,
            params,
        };
        if self.admits(&launch, whole) {
            return Ok(());
        }
        self.mismatch(&launch, whole).map_or(Ok(()), Err)
    }

    /// Whether `launch` matches, as [`Signature::mismatch`] would find: the
    /// question every launch asks, answered in compares only, the pairs that
    /// may not alias listed beforehand; `span` names each binding's bytes. A
    /// signature of more than [`MAX_BINDINGS`] bindings (which no backend
    /// builds) is left to [`Signature::mismatch`].
    #[inline]
    pub(crate) fn admits<B>(&self, launch: &LaunchShape<'_, B>, span: impl Fn(&B) -> Span) -> bool {
        let buffers = launch.buffers;
        let [x, y, z] = launch.groups;
        let [mx, my, mz] = launch.max_groups;
        // `exclusive` holds every pair only up to `MAX_BINDINGS` bindings.
        buffers.len() == self.bindings.len()
            && buffers.len() <= MAX_BINDINGS
            && launch.info == self.info_bytes as usize
            && launch.params == self.param_total as usize
            && x.wrapping_sub(1) < mx
            && y.wrapping_sub(1) < my
            && z.wrapping_sub(1) < mz
            && self.exclusive.iter().all(|&[a, b]| {
                match (buffers.get(usize::from(a)), buffers.get(usize::from(b))) {
                    (Some(a), Some(b)) => !span(a).overlaps(&span(b)),
                    _ => false,
                }
            })
    }

    /// What `launch` gets wrong, the first thing in order (the binding
    /// count, info bytes, parameter bytes, the grid, then a written buffer
    /// bound twice); `None` when it matches. Every branch but the last is a
    /// compare of two numbers; the sentences are built only on a mismatch.
    #[cold]
    pub(crate) fn mismatch<B>(
        &self,
        launch: &LaunchShape<'_, B>,
        span: impl Fn(&B) -> Span,
    ) -> Option<String> {
        let &LaunchShape {
            groups,
            max_groups,
            buffers,
            info,
            params,
        } = launch;
        let declared = self.bindings.as_slice();
        if buffers.len() != declared.len() {
            return Some(self.arity_mismatch(buffers.len()));
        }
        if info != self.info_bytes as usize {
            return Some(self.info_mismatch(info));
        }
        let expected = self.param_bytes();
        if params != expected as usize {
            return Some(param_mismatch(expected, params));
        }
        let [x, y, z] = groups;
        let [mx, my, mz] = max_groups;
        if x == 0 || y == 0 || z == 0 || x > mx || y > my || z > mz {
            return Some(grid_mismatch(groups, max_groups));
        }
        // Only a pair with a written side may alias: compare each written
        // binding with every other.
        for (i, access) in declared.iter().enumerate() {
            if !access.writes() {
                continue;
            }
            let a = span(&buffers[i]);
            let aliased = buffers
                .iter()
                .enumerate()
                .any(|(j, b)| j != i && span(b).overlaps(&a));
            if aliased {
                let spans: SmallVec<[Span; 8]> = buffers.iter().map(&span).collect();
                return Some(self.alias_mismatch(&spans));
            }
        }
        None
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
    fn alias_mismatch(&self, buffers: &[Span]) -> String {
        for (i, (a, &access_a)) in buffers.iter().zip(&self.bindings).enumerate() {
            for (j, (b, &access_b)) in buffers.iter().zip(&self.bindings).enumerate().skip(i + 1) {
                if a.overlaps(b) && (access_a.writes() || access_b.writes()) {
                    return format!(
                        "{} is bound at {i} ({}) and {j} ({}), over bytes they share; a \
                         written buffer may be bound only once",
                        a.buffer,
                        access_a.short(),
                        access_b.short()
                    );
                }
            }
        }
        "a written buffer is bound twice".into()
    }
}

/// All of buffer `id`, as a launch named by ids alone binds it.
fn whole(id: &BufferId) -> Span {
    Span::whole(*id, u64::MAX)
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
    fn a_foreign_signature_declares_buffers_and_nothing_else() {
        let sig = Signature::foreign("gemm", &[Access::Read, Access::Read, Access::Write]);
        assert!(sig.is_foreign());
        assert!(!Signature::new("k").is_foreign());
        assert_eq!(sig.workgroup_size(), [1, 1, 1]);
        assert_eq!(sig.accesses(), [Access::Read, Access::Read, Access::Write]);
        assert!(sig.validate().is_ok());
        let shown = sig.to_string();
        assert!(shown.starts_with("foreign gemm("), "{shown}");
        assert!(!Signature::new("k").to_string().contains("foreign"));
        for bad in [
            Signature::foreign("f", &[Access::Write]).info(4),
            Signature::foreign("f", &[Access::Write]).param(4),
        ] {
            let why = bad.validate().expect_err("refused");
            assert!(why.contains("foreign operation"), "{why}");
        }
        // Kernels keep their info and parameters.
        let kernel = Signature::new("k").binding(Access::Write).info(4).param(4);
        assert!(kernel.validate().is_ok());
        // A written buffer declared twice is refused like a launch's.
        let (a, b) = (BufferId(1), BufferId(2));
        let copy = Signature::foreign("copy", &[Access::Read, Access::Write]);
        assert!(
            copy.check_launch([1, 1, 1], [1, 1, 1], &[a, b], 0, 0)
                .is_ok()
        );
        assert!(
            copy.check_launch([1, 1, 1], [1, 1, 1], &[a, a], 0, 0)
                .is_err()
        );
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

    /// `admits` is the hot path's answer and `mismatch` the one that names
    /// what is wrong: they must agree on every launch, or a launch is let
    /// through that `mismatch` refuses (or refused for nothing).
    #[test]
    fn the_quick_check_agrees_with_the_one_that_explains() {
        let all = [Access::Read, Access::Write, Access::ReadWrite];
        let max = [4, 3, 2];
        let mut cases = 0;
        for bindings in 0..=4usize {
            for pattern in 0..3usize.pow(bindings as u32) {
                let accesses: Vec<Access> = (0..bindings)
                    .map(|k| all[pattern / 3usize.pow(k as u32) % 3])
                    .collect();
                let sig = Signature::new("k").bindings(&accesses).info(8).param(4);
                // Every way to name the buffers from four ids, one fewer and
                // one more than declared included.
                for bound in bindings.saturating_sub(1)..=bindings + 1 {
                    for naming in 0..4usize.pow(bound as u32) {
                        let ids: Vec<BufferId> = (0..bound)
                            .map(|k| BufferId((naming / 4usize.pow(k as u32) % 4) as u64))
                            .collect();
                        for (groups, info, params) in [
                            ([1, 1, 1], 8, 4),
                            ([4, 3, 2], 8, 4),
                            ([0, 1, 1], 8, 4),
                            ([1, 0, 1], 8, 4),
                            ([1, 1, 0], 8, 4),
                            ([5, 1, 1], 8, 4),
                            ([1, 4, 1], 8, 4),
                            ([1, 1, 3], 8, 4),
                            ([1, 1, 1], 7, 4),
                            ([1, 1, 1], 8, 5),
                        ] {
                            let launch = LaunchShape {
                                groups,
                                max_groups: max,
                                buffers: &ids,
                                info,
                                params,
                            };
                            let quick = sig.admits(&launch, whole);
                            let reason = sig.mismatch(&launch, whole);
                            assert_eq!(
                                quick,
                                reason.is_none(),
                                "{sig} over {ids:?}, grid {groups:?}, {info} B, {params} B: {reason:?}"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert!(cases > 100_000, "{cases}");
    }

    #[test]
    fn a_signature_past_the_binding_limit_is_still_checked() {
        // No backend builds one (`validate` refuses it), but a caller may
        // check launches against it: the pairs `admits` compares stop at the
        // limit, and the check beyond it is the explaining one's.
        let mut accesses = vec![Access::Read; MAX_BINDINGS + 2];
        accesses[MAX_BINDINGS + 1] = Access::Write;
        let sig = Signature::new("k").bindings(&accesses);
        let mut ids: Vec<BufferId> = (1..=accesses.len() as u64).map(BufferId).collect();
        let max = [1, 1, 1];
        let launch = LaunchShape {
            groups: max,
            max_groups: max,
            buffers: &ids,
            info: 0,
            params: 0,
        };
        assert!(!sig.admits(&launch, whole));
        assert!(sig.check_launch(max, max, &ids, 0, 0).is_ok());
        ids[MAX_BINDINGS + 1] = ids[MAX_BINDINGS];
        let alias = mismatch(sig.check_launch(max, max, &ids, 0, 0));
        assert!(
            alias.contains("bound at 16 (read) and 17 (write)"),
            "{alias}"
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
