//! Points inside a call where a test makes another call first, so that a
//! race between the two happens every time rather than now and then.
//! Outside tests they compile to nothing.

/// A point a call may be interrupted at, holding no lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// A write found its shared buffer's stream joined to no window and has
    /// not yet taken the locks that order it.
    WriteOrdered,
    /// A launch found its stream's join open and has not yet taken the
    /// locks it records under.
    LaunchJoined,
    /// A destroy found its graph's stream and has not yet locked it.
    DestroyFound,
    /// An operation on shared buffers knows the streams it involves and
    /// has not yet locked them.
    OrderLocking,
}

#[cfg(test)]
type Hook = (Point, Box<dyn FnOnce()>);

#[cfg(test)]
thread_local! {
    static NEXT: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

/// The calling thread runs `then` when it next reaches `point`, once.
#[cfg(test)]
pub(crate) fn at(point: Point, then: impl FnOnce() + 'static) {
    NEXT.with(|next| *next.borrow_mut() = Some((point, Box::new(then))));
}

/// The calling thread reached `point`: run what a test left for it there.
#[inline(always)]
pub(crate) fn reached(point: Point) {
    #[cfg(test)]
    {
        let hook = NEXT.with(|next| {
            let mut next = next.borrow_mut();
            match &*next {
                Some((waiting, _)) if *waiting == point => next.take(),
                _ => None,
            }
        });
        if let Some((_, then)) = hook {
            then();
        }
    }
    #[cfg(not(test))]
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn a_hook_runs_once_at_its_own_point_on_its_own_thread() {
        let runs = Rc::new(Cell::new(0));
        let counted = runs.clone();
        at(Point::WriteOrdered, move || counted.set(counted.get() + 1));
        reached(Point::LaunchJoined);
        std::thread::spawn(|| reached(Point::WriteOrdered))
            .join()
            .expect("another thread");
        assert_eq!(runs.get(), 0, "not its point, nor its thread");
        reached(Point::WriteOrdered);
        reached(Point::WriteOrdered);
        assert_eq!(runs.get(), 1);
    }
}
