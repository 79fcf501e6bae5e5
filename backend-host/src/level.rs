//! One level of a replay's dependency graph run at once: no two of its steps
//! touch a common byte with one writing it, so the level's pages are locked
//! once, cut into every step's bindings (written ranges exclusive, read ones
//! shared), and the steps run side by side on those views.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use smallvec::SmallVec;

use crate::kernels::{Kernel, Place, View, carve, place, run_groups};
use crate::memory::{Bytes, Range};
use crate::op::run_kernel;

/// One step of a level, with the ranges it touches.
pub(crate) enum Work<'a> {
    /// Copy `src` into `dst`.
    Copy { src: &'a Range, dst: &'a Range },
    /// Run `kernel` over `bindings`, reading `info`, with `params`.
    Kernel {
        kernel: &'a Kernel,
        groups: [u32; 3],
        bindings: &'a [Range],
        info: Option<&'a Range>,
        params: &'a [u8],
    },
}

impl Work<'_> {
    /// The ranges the step touches, each with whether it writes it: a
    /// kernel's bindings in order, then its info.
    fn ranges(&self) -> impl Iterator<Item = (&Range, bool)> {
        let (copy, kernel) = match self {
            Work::Copy { src, dst } => (Some([(*src, false), (*dst, true)]), None),
            Work::Kernel {
                kernel,
                bindings,
                info,
                ..
            } => {
                let accesses = kernel.signature().accesses();
                let bound = bindings
                    .iter()
                    .zip(accesses)
                    .map(|(range, access)| (range, access.writes()));
                (None, Some(bound.chain(info.map(|info| (info, false)))))
            }
        };
        copy.into_iter()
            .flatten()
            .chain(kernel.into_iter().flatten())
    }

    /// Run the step over `views`, its ranges in [`Work::ranges`]' order.
    fn run(&self, views: &mut [Option<View<'_>>]) -> Result<(), String> {
        let mut views: SmallVec<[View<'_>; 17]> = views
            .iter_mut()
            .map(|view| view.take().ok_or("a binding was not placed"))
            .collect::<Result<_, _>>()?;
        match self {
            Work::Copy { .. } => match &mut views[..] {
                [src, dst] => {
                    let (src, dst) = (src.bytes(), dst.bytes_mut()?);
                    let dst = dst
                        .get_mut(..src.len())
                        .ok_or("copy destination out of range")?;
                    dst.copy_from_slice(src);
                    Ok(())
                }
                _ => Err("a copy has two ranges".into()),
            },
            Work::Kernel {
                kernel,
                groups,
                bindings,
                params,
                ..
            } => {
                let (bound, info) = views.split_at_mut(bindings.len());
                let info = info.first().map_or(&[][..], View::bytes);
                run_kernel(kernel, || run_groups(kernel, *groups, bound, info, params))
            }
        }
    }
}

/// A step and the views of its ranges.
type Placed<'w, 'v, 'p> = (&'w Work<'w>, &'v mut [Option<View<'p>>]);

/// Run every step of `level` at once: the calling thread and each of
/// `pool`'s take the next step not yet taken until none is left, so the
/// caller starts at once and a helper that wakes late only takes less.
pub(crate) fn run(level: &[Work<'_>], pool: &rayon::ThreadPool) -> Result<(), String> {
    let mut pages: SmallVec<[&Range; 32]> = level
        .iter()
        .flat_map(|work| work.ranges().map(|(range, _)| range))
        .collect();
    pages.sort_by_key(|range| range.memory.id());
    pages.dedup_by_key(|range| range.memory.id());
    if let Some(released) = pages.iter().find(|range| range.memory.is_released()) {
        return Err(crate::op::touched_released(released));
    }
    let page_of = |range: &Range| {
        pages
            .iter()
            .position(|page| page.memory.id() == range.memory.id())
            .unwrap_or(0)
    };
    let mut places: SmallVec<[Place; 64]> = SmallVec::new();
    for (range, writes) in level.iter().flat_map(Work::ranges) {
        places.push(place(page_of(range), range, places.len(), writes)?);
    }
    // Locked in page order, as every dispatch locks, so no two workers can
    // deadlock; held until every step of the level is done.
    let mut guards: SmallVec<[Bytes<'_>; 32]> =
        pages.iter().map(|range| range.memory.bytes()).collect();
    let mut views: SmallVec<[Option<View<'_>>; 64]> = SmallVec::new();
    views.resize_with(places.len(), || None);
    let mut unused: &[u8] = &[];
    for (index, guard) in guards.iter_mut().enumerate() {
        let mut in_page: SmallVec<[Place; 64]> =
            places.iter().copied().filter(|p| p.page == index).collect();
        in_page.sort_by_key(|p| (p.start, p.end));
        carve(&mut guard[..], &in_page, &mut views, &mut unused)?;
    }
    let mut steps: SmallVec<[Mutex<Placed<'_, '_, '_>>; 16]> = SmallVec::new();
    let mut rest = &mut views[..];
    for work in level {
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(work.ranges().count());
        steps.push(Mutex::new((work, mine)));
        rest = tail;
    }
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let take_steps = || {
        while let Some(step) = steps.get(next.fetch_add(1, Ordering::Relaxed)) {
            // Each step is taken once, so its lock is never contended.
            let mut step = step.lock().unwrap_or_else(PoisonError::into_inner);
            let (work, views) = &mut *step;
            if let Err(err) = work.run(views) {
                let mut failure = failure.lock().unwrap_or_else(PoisonError::into_inner);
                failure.get_or_insert(err);
            }
        }
    };
    pool.in_place_scope(|scope| {
        for _ in 0..pool.current_num_threads() {
            scope.spawn(|_| take_steps());
        }
        take_steps();
    });
    match failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Memory, PageKind};

    #[test]
    fn a_level_of_copies_between_pages_runs_each_on_its_own_bytes() {
        let page = || Memory::new(PageKind::Device, 64).expect("a page");
        let (from, to) = (page(), page());
        let (a, b) = (Range::new(&from, 0, 16), Range::new(&from, 16, 16));
        let (c, d) = (Range::new(&to, 32, 16), Range::new(&to, 48, 16));
        assert!(a.store(&[1; 16]) && b.store(&[2; 16]));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool");
        let level = [
            Work::Copy { src: &a, dst: &c },
            Work::Copy { src: &b, dst: &d },
        ];
        run(&level, &pool).expect("runs");
        assert_eq!(c.load().expect("c"), [1; 16]);
        assert_eq!(d.load().expect("d"), [2; 16]);
    }
}
