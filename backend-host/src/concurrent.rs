//! A launch run beside other launches of the same replay: it reads its pages
//! under shared locks and writes into scratch memory, copied back under an
//! exclusive lock once its workgroups are done, so launches writing disjoint
//! ranges of one page run at the same time.

use std::cell::RefCell;

use smallvec::SmallVec;

use crate::kernels::{Kernel, View, run_groups};
use crate::memory::{Range, SharedBytes};

thread_local! {
    /// Where a launch on this thread writes before copying back: it grows to
    /// the most one launch writes and stays, so a warm replay allocates
    /// nothing.
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Whether two ranges share a byte.
fn overlaps(a: &Range, b: &Range) -> bool {
    a.memory.id() == b.memory.id()
        && a.offset < b.offset.saturating_add(b.len)
        && b.offset < a.offset.saturating_add(a.len)
}

/// Run every workgroup of `kernel` over `bindings`, with `info` and
/// `params`, while other launches with no hazard on these ranges run.
pub(crate) fn dispatch_beside(
    kernel: &Kernel,
    groups: [u32; 3],
    bindings: &[Range],
    info: Option<&Range>,
    params: &[u8],
) -> Result<(), String> {
    let accesses = kernel.signature().accesses();
    let writes = |binding: usize| accesses.get(binding).is_some_and(|a| a.writes());
    for (i, range) in bindings.iter().enumerate().filter(|(i, _)| writes(*i)) {
        let others = bindings.iter().enumerate().filter(|(j, _)| *j != i);
        if others
            .map(|(_, r)| r)
            .chain(info)
            .any(|other| overlaps(range, other))
        {
            return Err("a written binding shares its memory with another".into());
        }
    }
    let words: usize = bindings
        .iter()
        .enumerate()
        .filter(|(i, _)| writes(*i))
        .map(|(_, range)| range.len.div_ceil(8))
        .sum();
    SCRATCH.with_borrow_mut(|scratch| {
        if scratch.len() < words {
            scratch.resize(words, 0);
        }
        let scratch = &mut scratch[..words];
        compute(kernel, groups, bindings, info, params, scratch)?;
        write_back(bindings, &writes, scratch)
    })
}

/// Run the workgroups with the read bindings in place and the written ones
/// in `scratch`, filled first with what they hold (a kernel need not write
/// every byte it may).
fn compute(
    kernel: &Kernel,
    groups: [u32; 3],
    bindings: &[Range],
    info: Option<&Range>,
    params: &[u8],
    scratch: &mut [u64],
) -> Result<(), String> {
    // Each distinct page locked once, in page order, as every dispatch does.
    let mut pages: SmallVec<[&Range; 17]> = info.into_iter().chain(bindings).collect();
    pages.sort_by_key(|range| range.memory.id());
    pages.dedup_by_key(|range| range.memory.id());
    let guards: SmallVec<[SharedBytes<'_>; 17]> =
        pages.iter().map(|range| range.memory.shared()).collect();
    let bytes_of = |range: &Range| -> Result<&[u8], String> {
        let page = pages
            .iter()
            .position(|page| page.memory.id() == range.memory.id())
            .unwrap_or(0);
        let end = range.offset.checked_add(range.len);
        end.and_then(|end| guards[page].get(range.offset..end))
            .ok_or_else(|| "binding range outside its page".to_string())
    };
    let accesses = kernel.signature().accesses();
    let mut rest = scratch;
    let mut views: SmallVec<[View<'_>; 16]> = SmallVec::new();
    for (range, access) in bindings.iter().zip(accesses) {
        let bytes = bytes_of(range)?;
        if access.writes() {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(range.len.div_ceil(8));
            rest = tail;
            let out = &mut bytemuck::cast_slice_mut::<u64, u8>(mine)[..range.len];
            out.copy_from_slice(bytes);
            views.push(View::unique(out));
        } else {
            views.push(View::shared(bytes));
        }
    }
    let info = match info {
        Some(range) => bytes_of(range)?,
        None => &[],
    };
    run_groups(kernel, groups, &mut views, info, params)
}

/// Copy what the launch wrote from `scratch` into its pages, each page
/// locked once, in page order.
fn write_back(
    bindings: &[Range],
    writes: &impl Fn(usize) -> bool,
    scratch: &[u64],
) -> Result<(), String> {
    let mut written: SmallVec<[(&Range, &[u8]); 16]> = SmallVec::new();
    let mut rest = scratch;
    for (_, range) in bindings.iter().enumerate().filter(|(i, _)| writes(*i)) {
        let (mine, tail) = rest.split_at(range.len.div_ceil(8));
        rest = tail;
        written.push((range, &bytemuck::cast_slice::<u64, u8>(mine)[..range.len]));
    }
    written.sort_by_key(|(range, _)| range.memory.id());
    for group in written.chunk_by(|a, b| a.0.memory.id() == b.0.memory.id()) {
        let mut page = group[0].0.memory.bytes();
        for (range, bytes) in group {
            page.get_mut(range.offset..range.offset + range.len)
                .ok_or("binding range outside its page")?
                .copy_from_slice(bytes);
        }
    }
    Ok(())
}
