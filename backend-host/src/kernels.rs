//! Kernels of the host backend: Rust closures run once per workgroup over
//! the bound buffers in place, as a GPU runs a kernel over its grid.
//!
//! A kernel is safe Rust, so building one is safe: whatever the closure does,
//! it can only touch the bytes of the buffers it was given, and a binding its
//! signature declares read-only is handed to it as a shared slice.

use std::fmt;
use std::ops::Range as Span;
use std::sync::Arc;

use capture_core::{Error, Signature};
use capture_core::{MAX_BINDINGS, MAX_PARAM_BYTES};
use smallvec::SmallVec;

use crate::memory::{Bytes, Range};

/// The code of a host kernel: called once per workgroup of the launch's
/// grid with the workgroup's coordinates and the bound buffers, in binding
/// order. An `Err` (or a panic) is the kernel's fault, reported by the next
/// fence as a GPU reports one.
pub type Body = dyn Fn(&Group<'_>, &mut [View<'_>]) -> Result<(), String> + Send + Sync;

/// A compiled kernel of the host backend: its signature and its code.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<Inner>,
}

// Every queued launch holds a reference, taken on the caller's thread and
// let go on the worker's: the count's cache line moves between the two
// cores on every launch. Aligned, the `Arc` keeps its counts on a line of
// their own, so that this traffic does not evict what lies beside them (a
// signature, a buffer's metadata) from the caller's cache.
#[repr(align(128))]
struct Inner {
    signature: Signature,
    body: Box<Body>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.inner.signature)
    }
}

impl Kernel {
    /// A kernel with `signature`, running `body` once per workgroup.
    ///
    /// ```
    /// use backend_host::{Host, Kernel};
    /// use capture_core::{Access, Client, Params, Signature};
    ///
    /// // x[i] = x[i] * a, for i < n.
    /// let scale = Kernel::new(
    ///     Signature::new("scale").binding(Access::ReadWrite).param(4).param(4),
    ///     |group, buffers| {
    ///         let mut params = group.params();
    ///         let (n, a) = (params.u32()? as usize, params.f32()?);
    ///         let x = buffers[0].f32_mut()?;
    ///         for i in group.elements_x(n.min(x.len())) {
    ///             x[i] *= a;
    ///         }
    ///         Ok(())
    ///     },
    /// )?;
    /// let client = Client::<Host>::open()?;
    /// let stream = client.create_stream()?;
    /// let x = client.create_f32(stream, &[1.0, 2.0, 3.0])?;
    /// let kernel = capture_core::Kernel::new(scale);
    /// client.launch(stream, &kernel, [1, 1, 1], &[&x], &[], Params::new().u32(3).f32(2.0).as_bytes())?;
    /// assert_eq!(client.read_f32(&x)?, [2.0, 4.0, 6.0]);
    /// # Ok::<(), capture_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] when no backend could build the signature (see
    /// [`Signature::validate`]).
    pub fn new(
        signature: Signature,
        body: impl Fn(&Group<'_>, &mut [View<'_>]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        signature.validate().map_err(|log| Error::Compile {
            kernel: signature.name().to_owned(),
            log,
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                signature,
                body: Box::new(body),
            }),
        })
    }

    /// A foreign operation named `name` over buffers of `accesses`: `op`
    /// runs on the stream's worker in stream order, eagerly and at every
    /// replay, with the declared buffers' bytes (the views of a launch of
    /// one workgroup), as a CPU library's work would (a GEMM from a crate,
    /// say). Safe: `op` reaches only the views it is given. An `Err` or a
    /// panic is the operation's fault, reported by the next fence like a
    /// kernel's. `op` must not call the client: it runs on the stream's
    /// worker, which a call waiting for that stream would wait for.
    /// [`Client::foreign`](capture_core::Client::foreign) issues it.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] for more buffers than a launch may bind.
    pub fn foreign(
        name: &str,
        accesses: &[capture_core::Access],
        op: impl Fn(&mut [View<'_>]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        Self::new(Signature::foreign(name, accesses), move |_, views| {
            op(views)
        })
    }

    /// What the kernel takes.
    #[inline]
    pub fn signature(&self) -> &Signature {
        &self.inner.signature
    }

    /// Whether `other` is this very kernel (a clone of it).
    pub fn same(&self, other: &Kernel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// What tells this kernel from every other alive at the same time.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner).addr()
    }
}

/// One workgroup of a launch, as the kernel's code sees it.
#[derive(Debug, Clone, Copy)]
pub struct Group<'a> {
    /// This workgroup's coordinates in the grid.
    pub id: [u32; 3],
    /// The grid: workgroups in x, y and z.
    pub groups: [u32; 3],
    /// Threads per workgroup, from the signature.
    pub size: [u32; 3],
    /// The launch's info bytes (empty for a kernel that reads none).
    pub info: &'a [u8],
    /// The launch's by-value parameters, packed in declaration order.
    pub params: &'a [u8],
}

impl<'a> Group<'a> {
    /// The elements this workgroup covers in a 1-D launch, clipped to `n`:
    /// thread `t` of workgroup `(x, y)` handles element
    /// `(y * groups.x + x) * size.x + t`, as the builtins and the GPU
    /// backends' 1-D kernels do.
    pub fn elements_x(&self, n: usize) -> Span<usize> {
        let linear = u64::from(self.id[1]) * u64::from(self.groups[0]) + u64::from(self.id[0]);
        let size = u64::from(self.size[0]);
        let start = usize::try_from(linear.saturating_mul(size)).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        start.min(n)..end.min(n)
    }

    /// A reader over the by-value parameters, in declaration order.
    pub fn params(&self) -> Reader<'a> {
        Reader(self.params)
    }

    /// A reader over the info bytes.
    pub fn info(&self) -> Reader<'a> {
        Reader(self.info)
    }
}

/// Reads little-endian values off the front of a byte string.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, tail) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| format!("{N} more bytes asked of {} left", self.0.len()))?;
        self.0 = tail;
        Ok(*head)
    }

    /// The next `u32`.
    pub fn u32(&mut self) -> Result<u32, String> {
        self.take().map(u32::from_le_bytes)
    }

    /// The next `i32`.
    pub fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_le_bytes)
    }

    /// The next `f32`.
    pub fn f32(&mut self) -> Result<f32, String> {
        self.take().map(f32::from_le_bytes)
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> Result<u64, String> {
        self.take().map(u64::from_le_bytes)
    }
}

/// One bound buffer, in place: shared for a binding the signature declares
/// read-only, exclusive for one it writes.
#[derive(Debug)]
pub struct View<'a> {
    bytes: Bound<'a>,
}

#[derive(Debug)]
enum Bound<'a> {
    Shared(&'a [u8]),
    Unique(&'a mut [u8]),
}

impl View<'_> {
    /// The buffer's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bound::Shared(bytes) => bytes,
            Bound::Unique(bytes) => bytes,
        }
    }

    /// The buffer's bytes, to write; an error for a read-only binding.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], String> {
        match &mut self.bytes {
            Bound::Shared(_) => Err("the signature declares this binding read-only".into()),
            Bound::Unique(bytes) => Ok(bytes),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's whole `f32`s: a length that is not a multiple of 4
    /// leaves its last bytes out of the view, as a GPU array of `f32` over
    /// the same binding does.
    pub fn f32(&self) -> Result<&[f32], String> {
        bytemuck::try_cast_slice(whole::<4>(self.bytes()))
            .map_err(|e| format!("not an f32 array: {e}"))
    }

    /// The buffer's whole `f32`s, to write; the bytes past them stay as
    /// they are.
    pub fn f32_mut(&mut self) -> Result<&mut [f32], String> {
        bytemuck::try_cast_slice_mut(whole_mut::<4>(self.bytes_mut()?))
            .map_err(|e| format!("not an f32 array: {e}"))
    }

    /// The buffer's whole `u32`s.
    pub fn u32(&self) -> Result<&[u32], String> {
        bytemuck::try_cast_slice(whole::<4>(self.bytes()))
            .map_err(|e| format!("not a u32 array: {e}"))
    }

    /// The buffer's whole `u32`s, to write; the bytes past them stay as
    /// they are.
    pub fn u32_mut(&mut self) -> Result<&mut [u32], String> {
        bytemuck::try_cast_slice_mut(whole_mut::<4>(self.bytes_mut()?))
            .map_err(|e| format!("not a u32 array: {e}"))
    }
}

/// The first bytes of `bytes` that make whole elements of `N` bytes.
fn whole<const N: usize>(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.len() - bytes.len() % N]
}

/// [`whole`], to write.
fn whole_mut<const N: usize>(bytes: &mut [u8]) -> &mut [u8] {
    let len = bytes.len() - bytes.len() % N;
    &mut bytes[..len]
}

/// One launch as the worker runs it.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub kernel: Kernel,
    pub groups: [u32; 3],
    // Inline up to the most a signature may declare: a launch allocates
    // nothing.
    pub bindings: SmallVec<[Range; MAX_BINDINGS]>,
    pub info: Option<Range>,
    pub params: SmallVec<[u8; MAX_PARAM_BYTES as usize]>,
}

/// Where one binding lies among the locked pages.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    pub(crate) page: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) binding: usize,
    pub(crate) writes: bool,
}

impl Dispatch {
    /// Every range the launch touches.
    pub(crate) fn ranges(&self) -> impl Iterator<Item = &Range> {
        self.info.iter().chain(&self.bindings)
    }

    /// Run every workgroup of the grid over the bound buffers in place.
    pub(crate) fn run(&self) -> Result<(), String> {
        dispatch(
            &self.kernel,
            self.groups,
            &self.bindings,
            self.info.as_ref(),
            &self.params,
        )
    }
}

/// Run every workgroup of `groups` of `kernel` over `bindings` in place,
/// with `info` and `params`: an eager launch's work, and each launch of a
/// replayed program's.
pub(crate) fn dispatch(
    kernel: &Kernel,
    groups: [u32; 3],
    bindings: &[Range],
    info: Option<&Range>,
    params: &[u8],
) -> Result<(), String> {
    let signature = kernel.signature();
    // Each distinct page is locked once, in page order, so two bindings
    // in one page share its lock and no two workers can deadlock.
    let mut pages: SmallVec<[&Range; 17]> = info.into_iter().chain(bindings).collect();
    pages.sort_by_key(|range| range.memory.id());
    pages.dedup_by_key(|range| range.memory.id());
    let mut guards: SmallVec<[Bytes<'_>; 17]> =
        pages.iter().map(|range| range.memory.bytes()).collect();
    let page_of = |range: &Range| {
        pages
            .iter()
            .position(|page| page.memory.id() == range.memory.id())
            .unwrap_or(0)
    };

    let accesses = signature.accesses();
    let mut places: SmallVec<[Place; 17]> = SmallVec::new();
    for (binding, (range, access)) in bindings.iter().zip(accesses).enumerate() {
        places.push(place(page_of(range), range, binding, access.writes())?);
    }
    let info_place = match info {
        Some(range) => Some(place(page_of(range), range, usize::MAX, false)?),
        None => None,
    };
    places.extend(info_place);

    let mut views: SmallVec<[Option<View<'_>>; 16]> = SmallVec::new();
    views.resize_with(bindings.len(), || None);
    let mut info_bytes: &[u8] = &[];
    for (index, guard) in guards.iter_mut().enumerate() {
        let mut in_page: SmallVec<[Place; 17]> =
            places.iter().copied().filter(|p| p.page == index).collect();
        in_page.sort_by_key(|p| (p.start, p.end));
        carve(&mut guard[..], &in_page, &mut views, &mut info_bytes)?;
    }
    let mut views: SmallVec<[View<'_>; 16]> = views
        .into_iter()
        .map(|view| view.ok_or("a binding was not placed"))
        .collect::<Result<_, _>>()?;

    run_groups(kernel, groups, &mut views, info_bytes, params)
}

/// Run `kernel`'s code once per workgroup of `groups` over `views`.
pub(crate) fn run_groups(
    kernel: &Kernel,
    groups: [u32; 3],
    views: &mut [View<'_>],
    info: &[u8],
    params: &[u8],
) -> Result<(), String> {
    let signature = kernel.signature();
    let [gx, gy, gz] = groups;
    for z in 0..gz {
        for y in 0..gy {
            for x in 0..gx {
                let group = Group {
                    id: [x, y, z],
                    groups,
                    size: signature.workgroup_size(),
                    info,
                    params,
                };
                (kernel.inner.body)(&group, views)
                    .map_err(|err| format!("kernel {} failed: {err}", signature.name()))?;
            }
        }
    }
    Ok(())
}

pub(crate) fn place(
    page: usize,
    range: &Range,
    binding: usize,
    writes: bool,
) -> Result<Place, String> {
    let end = range
        .offset
        .checked_add(range.len)
        .ok_or("binding range overflows")?;
    Ok(Place {
        page,
        start: range.offset,
        end,
        binding,
        writes,
    })
}

/// Cut `page` into the views of `places` (sorted by start). Ranges that
/// share a byte (bound twice, or views of one buffer that overlap) are
/// shared, which only read-only bindings may be; a written range must share
/// no byte with another.
pub(crate) fn carve<'a>(
    mut page: &'a mut [u8],
    places: &[Place],
    views: &mut [Option<View<'a>>],
    info: &mut &'a [u8],
) -> Result<(), String> {
    let mut consumed = 0usize;
    let mut i = 0;
    while let Some(first) = places.get(i) {
        // The ranges that overlap, one through another, from `first`.
        let mut end = first.end;
        let mut same = 1;
        while let Some(next) = places.get(i + same).filter(|next| next.start < end) {
            end = end.max(next.end);
            same += 1;
        }
        let group = &places[i..i + same];
        i += same;
        let rest = std::mem::take(&mut page);
        let (_, rest) = rest
            .split_at_mut_checked(first.start - consumed)
            .ok_or("binding range outside its page")?;
        let (chunk, rest) = rest
            .split_at_mut_checked(end - first.start)
            .ok_or("binding range outside its page")?;
        page = rest;
        consumed = end;
        if let [only] = group
            && only.writes
        {
            if let Some(slot) = views.get_mut(only.binding) {
                *slot = Some(View {
                    bytes: Bound::Unique(chunk),
                });
            }
            continue;
        }
        if group.iter().any(|p| p.writes) {
            return Err("a written binding shares its memory with another".into());
        }
        let shared: &'a [u8] = chunk;
        for p in group {
            let bytes = &shared[p.start - first.start..p.end - first.start];
            match views.get_mut(p.binding) {
                Some(slot) => {
                    *slot = Some(View {
                        bytes: Bound::Shared(bytes),
                    })
                }
                None => *info = bytes,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Memory, PageKind};
    use capture_core::Access;

    fn page(values: &[f32]) -> Arc<Memory> {
        let memory = Memory::new(PageKind::Device, values.len() * 4).expect("page");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        memory.bytes().copy_from_slice(&bytes);
        memory
    }

    fn read(memory: &Memory) -> Vec<f32> {
        bytemuck::cast_slice::<u8, f32>(&memory.bytes()).to_vec()
    }

    fn add() -> Kernel {
        Kernel::new(
            Signature::new("add")
                .bindings(&[Access::ReadWrite, Access::Read])
                .workgroup([2, 1, 1]),
            |group, buffers| {
                let [x, y] = buffers else {
                    return Err("two bindings".into());
                };
                let (x, y) = (x.f32_mut()?, y.f32()?);
                for i in group.elements_x(x.len()) {
                    x[i] += y[i];
                }
                Ok(())
            },
        )
        .expect("valid")
    }

    #[test]
    fn bindings_in_one_page_are_views_of_it() {
        let memory = page(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
        let dispatch = Dispatch {
            kernel: add(),
            groups: [2, 1, 1],
            bindings: [Range::new(&memory, 0, 12), Range::new(&memory, 12, 12)]
                .into_iter()
                .collect(),
            info: None,
            params: SmallVec::new(),
        };
        dispatch.run().expect("runs");
        assert_eq!(read(&memory), [11.0, 22.0, 33.0, 10.0, 20.0, 30.0]);
    }

    #[test]
    fn the_grid_is_honoured() {
        let x = page(&[0.0; 8]);
        let y = page(&[1.0; 8]);
        let dispatch = Dispatch {
            kernel: add(),
            groups: [1, 1, 1],
            bindings: [Range::new(&x, 0, 32), Range::new(&y, 0, 32)]
                .into_iter()
                .collect(),
            info: None,
            params: SmallVec::new(),
        };
        dispatch.run().expect("runs");
        assert_eq!(
            read(&x),
            [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "one 2-thread group"
        );
    }

    #[test]
    fn a_written_alias_and_a_bad_range_are_errors() {
        let memory = page(&[1.0; 4]);
        let aliased = Dispatch {
            kernel: add(),
            groups: [1, 1, 1],
            bindings: [Range::new(&memory, 0, 8), Range::new(&memory, 0, 8)]
                .into_iter()
                .collect(),
            info: None,
            params: SmallVec::new(),
        };
        assert!(aliased.run().unwrap_err().contains("shares"));
        let overlapping = Dispatch {
            bindings: [Range::new(&memory, 0, 8), Range::new(&memory, 4, 8)]
                .into_iter()
                .collect(),
            ..aliased.clone()
        };
        assert!(overlapping.run().unwrap_err().contains("shares"));
        let outside = Dispatch {
            bindings: [Range::new(&memory, 0, 8), Range::new(&memory, 8, 16)]
                .into_iter()
                .collect(),
            ..aliased
        };
        assert!(outside.run().unwrap_err().contains("outside"));
    }

    #[test]
    fn read_only_bindings_may_share_memory() {
        let sum = Kernel::new(
            Signature::new("sum").bindings(&[Access::Read, Access::Read, Access::Write]),
            |_, buffers| {
                let [a, b, out] = buffers else {
                    return Err("three bindings".into());
                };
                let total = a.f32()?[0] + b.f32()?[0];
                out.f32_mut()?[0] = total;
                assert!(a.bytes_mut().is_err(), "read-only");
                Ok(())
            },
        )
        .expect("valid");
        let memory = page(&[2.0, 0.0]);
        let dispatch = Dispatch {
            kernel: sum.clone(),
            groups: [1, 1, 1],
            bindings: [
                Range::new(&memory, 0, 4),
                Range::new(&memory, 0, 4),
                Range::new(&memory, 4, 4),
            ]
            .into_iter()
            .collect(),
            info: None,
            params: SmallVec::new(),
        };
        dispatch.run().expect("runs");
        assert_eq!(read(&memory), [2.0, 4.0]);
        // Two views that share only some bytes, each seen from its start.
        let memory = page(&[1.0, 2.0, 3.0, 0.0]);
        let dispatch = Dispatch {
            kernel: sum,
            groups: [1, 1, 1],
            bindings: [
                Range::new(&memory, 4, 8),
                Range::new(&memory, 0, 8),
                Range::new(&memory, 12, 4),
            ]
            .into_iter()
            .collect(),
            info: None,
            params: SmallVec::new(),
        };
        dispatch.run().expect("runs");
        assert_eq!(read(&memory), [1.0, 2.0, 3.0, 3.0], "2 + 1");
    }

    #[test]
    fn readers_take_values_in_order() {
        let bytes: Vec<u8> = [7u32.to_le_bytes(), 1.5f32.to_le_bytes()].concat();
        let mut reader = Reader(&bytes);
        assert_eq!(reader.u32(), Ok(7));
        assert_eq!(reader.f32(), Ok(1.5));
        assert!(reader.u32().is_err());
        let group = Group {
            id: [1, 1, 0],
            groups: [3, 2, 1],
            size: [4, 1, 1],
            info: &[],
            params: &[],
        };
        assert_eq!(group.elements_x(100), 16..20);
        assert_eq!(group.elements_x(18), 16..18);
        assert_eq!(group.elements_x(10), 10..10);
    }

    #[test]
    fn an_invalid_signature_is_a_compile_error() {
        let err = Kernel::new(Signature::new("k").workgroup([0, 1, 1]), |_, _| Ok(()))
            .expect_err("refused");
        assert!(
            matches!(err, Error::Compile { ref kernel, .. } if kernel == "k"),
            "{err}"
        );
    }
}
