//! Which stream must wait for which before it touches a buffer another
//! stream used (rule 20), kept apart from the locks and drivers that act on
//! it.
//!
//! Each stream counts the operations it issues (its points) and keeps, per
//! other stream, the point it is ordered after: a vector clock. A wait is
//! always for the other stream's whole work so far, so one event serves
//! every buffer it wrote. Per buffer, the last write and the reads since:
//! an access needs a wait only for a hazard past what its stream is already
//! ordered after, and a buffer used on one stream never needs one.

use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

use crate::hashing::FastMap;
use crate::ids::{BufferId, StreamId};
use crate::kernels::signature::Access;

/// `order`, locked. A panic under the lock leaves clocks that are at worst
/// behind, which asks for waits that are not needed, never misses one.
pub(crate) fn lock(order: &Mutex<StreamOrder>) -> MutexGuard<'_, StreamOrder> {
    order
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An operation's place in its stream: 1 for the stream's first.
pub type Point = u64;

/// How far one stream is, and what it is ordered after.
#[derive(Debug, Clone, Default)]
struct Clock {
    /// Operations the stream has issued.
    issued: Point,
    /// Per other stream, the point this one is ordered after.
    after: FastMap<StreamId, Point>,
}

/// Who used a buffer since it was last written, and who wrote it.
#[derive(Debug, Clone, Default)]
struct Uses {
    /// The last write: one, but for a buffer whose own stream's work is
    /// counted as a write beside a write the order saw ([`StreamOrder::adopt`]),
    /// which are not ordered one after the other.
    writes: SmallVec<[(StreamId, Point); 1]>,
    /// The latest read of each stream since the writes.
    reads: SmallVec<[(StreamId, Point); 2]>,
}

impl Uses {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }
}

/// A wait an access needs: on `stream`, whose work up to `point` (at least)
/// the access must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The stream to wait for, at its current end.
    pub stream: StreamId,
    /// The point of that stream's work the hazard lies at.
    pub point: Point,
}

/// The ordering of a client's streams around the buffers they share: what
/// each stream must wait for before it touches a buffer, and what each has
/// waited for. Plain bookkeeping: the caller records the events and makes
/// the waits it asks for.
#[derive(Debug, Default)]
pub struct StreamOrder {
    clocks: FastMap<StreamId, Clock>,
    buffers: FastMap<BufferId, Uses>,
}

impl StreamOrder {
    /// The point `stream` has reached: operations it issued.
    pub fn issued(&self, stream: StreamId) -> Point {
        self.clocks.get(&stream).map_or(0, |clock| clock.issued)
    }

    /// The point of `other` that `stream` is ordered after.
    pub fn ordered_after(&self, stream: StreamId, other: StreamId) -> Point {
        if stream == other {
            return self.issued(stream);
        }
        self.clocks
            .get(&stream)
            .and_then(|clock| clock.after.get(&other))
            .copied()
            .unwrap_or(0)
    }

    /// The waits `stream` needs before an operation that makes `accesses`,
    /// one per other stream at most (the latest hazard with it), none for a
    /// stream it is already ordered past.
    pub fn needs(
        &self,
        stream: StreamId,
        accesses: impl IntoIterator<Item = (BufferId, Access)>,
    ) -> SmallVec<[Wait; 2]> {
        let mut waits: SmallVec<[Wait; 2]> = SmallVec::new();
        let mut need = |other: StreamId, point: Point| {
            if other == stream || self.ordered_after(stream, other) >= point {
                return;
            }
            match waits.iter_mut().find(|wait| wait.stream == other) {
                Some(wait) => wait.point = wait.point.max(point),
                None => waits.push(Wait {
                    stream: other,
                    point,
                }),
            }
        };
        for (buffer, access) in accesses {
            let Some(uses) = self.buffers.get(&buffer) else {
                continue;
            };
            for &(writer, point) in &uses.writes {
                need(writer, point);
            }
            if access.writes() {
                for &(reader, point) in &uses.reads {
                    need(reader, point);
                }
            }
        }
        waits
    }

    /// `stream` waited, on the device, for everything `other` has issued so
    /// far: from here it is ordered after that, and after whatever `other`
    /// was ordered after.
    pub fn waited(&mut self, stream: StreamId, other: StreamId) {
        if stream == other {
            return;
        }
        let theirs = self.clocks.get(&other).cloned().unwrap_or_default();
        let mine = self.clocks.entry(stream).or_default();
        let entry = mine.after.entry(other).or_default();
        *entry = (*entry).max(theirs.issued);
        for (third, point) in theirs.after {
            if third != stream {
                let entry = mine.after.entry(third).or_default();
                *entry = (*entry).max(point);
            }
        }
    }

    /// `stream` issued work this order did not see: from here its point is
    /// past that work, so whoever waits for it now waits past the work.
    pub fn advance(&mut self, stream: StreamId) -> Point {
        self.issue(stream, [])
    }

    /// `buffer`, whose own stream is `stream`, counts as written at
    /// `stream`'s current point: what the stream did with it before, unseen
    /// by the order, is what another stream must be ordered after. A write
    /// the order saw stays beside it.
    pub fn adopt(&mut self, stream: StreamId, buffer: BufferId) {
        let point = self.issued(stream);
        if point == 0 {
            return;
        }
        let uses = self.buffers.entry(buffer).or_default();
        uses.writes.retain(|(writer, _)| *writer != stream);
        uses.writes.push((stream, point));
    }

    /// `stream` issued an operation making `accesses` (after the waits
    /// [`StreamOrder::needs`] asked for). Returns its point.
    pub fn issue(
        &mut self,
        stream: StreamId,
        accesses: impl IntoIterator<Item = (BufferId, Access)>,
    ) -> Point {
        let clock = self.clocks.entry(stream).or_default();
        clock.issued += 1;
        let point = clock.issued;
        for (buffer, access) in accesses {
            let uses = self.buffers.entry(buffer).or_default();
            if access.writes() {
                uses.writes.clear();
                uses.writes.push((stream, point));
                uses.reads.clear();
            } else if access.reads() {
                match uses.reads.iter_mut().find(|(reader, _)| *reader == stream) {
                    Some(read) => read.1 = point,
                    None => uses.reads.push((stream, point)),
                }
            }
        }
        point
    }

    /// [`StreamOrder::issue`], recording only the buffers already ordered:
    /// a buffer never shared needs none, and its first sharing counts all
    /// its stream's work before as a write.
    pub fn issue_tracked(
        &mut self,
        stream: StreamId,
        accesses: impl IntoIterator<Item = (BufferId, Access)>,
    ) -> Point {
        let tracked: SmallVec<[(BufferId, Access); 8]> = accesses
            .into_iter()
            .filter(|(buffer, _)| self.buffers.contains_key(buffer))
            .collect();
        self.issue(stream, tracked)
    }

    /// The streams that used `buffer` since its last write (the writer
    /// included), each with its latest point: what must be past before its
    /// memory is reused.
    pub fn users(&self, buffer: BufferId) -> SmallVec<[(StreamId, Point); 2]> {
        let mut users: SmallVec<[(StreamId, Point); 2]> = SmallVec::new();
        if let Some(uses) = self.buffers.get(&buffer) {
            for &(stream, point) in uses.writes.iter().chain(&uses.reads) {
                match users.iter_mut().find(|(user, _)| *user == stream) {
                    Some(user) => user.1 = user.1.max(point),
                    None => users.push((stream, point)),
                }
            }
        }
        users
    }

    /// Buffers the order keeps something of.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> usize {
        self.buffers.len()
    }

    /// `buffer` is gone: nothing will order against it any more.
    pub fn forget(&mut self, buffer: BufferId) {
        self.buffers.remove(&buffer);
    }

    /// `stream` is gone: no wait is asked for it, and none of its clock is
    /// kept. Its uses of buffers are forgotten with it.
    pub fn forget_stream(&mut self, stream: StreamId) {
        self.clocks.remove(&stream);
        for clock in self.clocks.values_mut() {
            clock.after.remove(&stream);
        }
        self.buffers.retain(|_, uses| {
            uses.writes.retain(|(writer, _)| *writer != stream);
            uses.reads.retain(|(reader, _)| *reader != stream);
            !uses.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    const STREAMS: u64 = 4;
    const BUFFERS: u64 = 3;

    #[derive(Debug, Clone)]
    enum Op {
        /// An operation on `stream` making `accesses`.
        Run {
            stream: u64,
            accesses: Vec<(u64, Access)>,
        },
        /// `stream` waits for all of `other`'s work so far, as a user does.
        Wait { stream: u64, other: u64 },
    }

    fn access() -> impl Strategy<Value = Access> {
        prop_oneof![
            Just(Access::Read),
            Just(Access::Write),
            Just(Access::ReadWrite)
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (
                0..STREAMS,
                proptest::collection::vec((0..BUFFERS, access()), 1..3)
            )
                .prop_map(|(stream, accesses)| Op::Run { stream, accesses }),
            1 => (0..STREAMS, 0..STREAMS).prop_map(|(stream, other)| Op::Wait { stream, other }),
        ]
    }

    /// The order the device keeps, written out as a graph of operations:
    /// each stream's in issue order, and a wait's edge from the other
    /// stream's last operation to the waiter's next. Independent of the
    /// vector clocks it checks.
    #[derive(Default)]
    struct Model {
        /// Operations per stream, each the set of operations that must
        /// precede it directly (beyond its stream's previous one).
        streams: Vec<Vec<BTreeSet<(usize, usize)>>>,
        /// Per stream, edges waiting for its next operation.
        pending: Vec<BTreeSet<(usize, usize)>>,
    }

    impl Model {
        fn new() -> Self {
            Self {
                streams: vec![Vec::new(); STREAMS as usize],
                pending: vec![BTreeSet::new(); STREAMS as usize],
            }
        }

        /// Whether operation `from` precedes the next operation of `stream`.
        fn precedes_next(&self, from: (usize, usize), stream: usize) -> bool {
            let mut seen = BTreeSet::new();
            let mut todo: Vec<(usize, usize)> = self.pending[stream].iter().copied().collect();
            if let Some(last) = self.streams[stream].len().checked_sub(1) {
                todo.push((stream, last));
            }
            while let Some(node) = todo.pop() {
                if node == from {
                    return true;
                }
                if !seen.insert(node) {
                    continue;
                }
                let (s, i) = node;
                if i > 0 {
                    todo.push((s, i - 1));
                }
                todo.extend(self.streams[s][i].iter().copied());
            }
            false
        }

        /// An event at `other`'s end follows its last operation and the
        /// waits it made since, as a device orders a stream's waits.
        fn wait(&mut self, stream: usize, other: usize) {
            let theirs = self.pending[other].clone();
            self.pending[stream].extend(theirs);
            if let Some(last) = self.streams[other].len().checked_sub(1) {
                self.pending[stream].insert((other, last));
            }
        }

        fn run(&mut self, stream: usize) {
            let edges = std::mem::take(&mut self.pending[stream]);
            self.streams[stream].push(edges);
        }
    }

    fn id(stream: u64) -> StreamId {
        StreamId(stream + 1)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every access follows the last write of each buffer it touches,
        /// and a write follows every read since; each wait asked for is for
        /// a hazard not yet ordered, and at most one per other stream.
        #[test]
        fn waits_are_exactly_the_missing_orderings(ops in proptest::collection::vec(op(), 1..60)) {
            let mut ordering = StreamOrder::default();
            let mut model = Model::new();
            // Per buffer: the last write and the reads since, as operations.
            let mut writes: Vec<Option<(usize, usize)>> = vec![None; BUFFERS as usize];
            let mut reads: Vec<Vec<(usize, usize)>> = vec![Vec::new(); BUFFERS as usize];
            for op in ops {
                match op {
                    Op::Wait { stream, other } => {
                        ordering.waited(id(stream), id(other));
                        if stream != other {
                            model.wait(stream as usize, other as usize);
                        }
                    }
                    Op::Run { stream, accesses } => {
                        let s = stream as usize;
                        let keyed: Vec<_> =
                            accesses.iter().map(|&(b, a)| (BufferId(b), a)).collect();
                        let waits = ordering.needs(id(stream), keyed.iter().copied());
                        let mut streams = BTreeSet::new();
                        for wait in &waits {
                            prop_assert!(streams.insert(wait.stream), "two waits on one stream");
                            let other = (wait.stream.0 - 1) as usize;
                            prop_assert!(other != s, "a wait on its own stream");
                            let hazard = (other, (wait.point - 1) as usize);
                            prop_assert!(
                                !model.precedes_next(hazard, s),
                                "a wait for {hazard:?}, which {s} already follows"
                            );
                        }
                        for wait in &waits {
                            ordering.waited(id(stream), wait.stream);
                            model.wait(s, (wait.stream.0 - 1) as usize);
                        }
                        // Every hazard is ordered now.
                        for &(buffer, access) in &accesses {
                            let b = buffer as usize;
                            let mut hazards: Vec<(usize, usize)> = writes[b].into_iter().collect();
                            if access.writes() {
                                hazards.extend(reads[b].iter().copied());
                            }
                            for hazard in hazards {
                                prop_assert!(
                                    hazard.0 == s || model.precedes_next(hazard, s),
                                    "{access:?} of buffer {b} on {s} is not ordered after {hazard:?}"
                                );
                            }
                        }
                        let point = ordering.issue(id(stream), keyed.iter().copied());
                        model.run(s);
                        let index = model.streams[s].len() - 1;
                        prop_assert_eq!(point, index as u64 + 1);
                        for &(buffer, access) in &accesses {
                            let b = buffer as usize;
                            if access.writes() {
                                writes[b] = Some((s, index));
                                reads[b].clear();
                            } else {
                                reads[b].retain(|(r, _)| *r != s);
                                reads[b].push((s, index));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_buffer_used_on_one_stream_needs_no_wait() {
        let mut ordering = StreamOrder::default();
        let (a, x) = (StreamId(1), BufferId(1));
        for access in [
            Access::Write,
            Access::Read,
            Access::ReadWrite,
            Access::Write,
        ] {
            assert!(ordering.needs(a, [(x, access)]).is_empty());
            ordering.issue(a, [(x, access)]);
        }
        assert_eq!(ordering.users(x).as_slice(), [(a, 4)]);
    }

    #[test]
    fn a_buffer_shared_late_counts_its_streams_work_so_far_as_a_write() {
        let mut order = StreamOrder::default();
        let (a, b, c, x, y) = (
            StreamId(1),
            StreamId(2),
            StreamId(3),
            BufferId(1),
            BufferId(2),
        );
        // a worked unseen by the order: its point moves past that work.
        assert_eq!(order.issued(a), 0);
        assert_eq!(order.advance(a), 1);
        assert_eq!(order.advance(a), 2);
        assert_eq!(order.issued(a), 2);
        order.adopt(a, x);
        assert_eq!(
            order.needs(b, [(x, Access::Read)]).as_slice(),
            [Wait {
                stream: a,
                point: 2
            }]
        );
        // A stream that never worked has nothing to be waited for.
        order.adopt(c, y);
        assert!(order.needs(b, [(y, Access::Write)]).is_empty());
        // A write the order saw stays beside the adopted one: a reader
        // waits for both.
        order.waited(b, a);
        order.issue(b, [(x, Access::Write)]);
        order.advance(a);
        order.adopt(a, x);
        let waits = order.needs(c, [(x, Access::Read)]);
        assert_eq!(waits.len(), 2, "{waits:?}");
        assert_eq!(order.users(x).len(), 2);
    }

    #[test]
    fn replays_record_only_buffers_the_order_knows() {
        let mut order = StreamOrder::default();
        let (a, b, x, y) = (StreamId(1), StreamId(2), BufferId(1), BufferId(2));
        order.issue(a, [(x, Access::Write)]);
        let point = order.issue_tracked(b, [(x, Access::Read), (y, Access::Write)]);
        assert_eq!(point, 1);
        assert_eq!(order.users(x).as_slice(), [(a, 1), (b, 1)]);
        assert!(order.users(y).is_empty(), "y was never shared");
        // A stream that goes takes its uses along; a buffer left unused is
        // forgotten.
        order.forget_stream(b);
        assert_eq!(order.users(x).as_slice(), [(a, 1)]);
        order.forget_stream(a);
        assert!(order.users(x).is_empty());
        assert!(order.buffers.is_empty(), "{:?}", order.buffers);
        assert_eq!(order.issued(a), 0);
    }

    #[test]
    fn a_wait_carries_what_the_other_stream_was_ordered_after() {
        let mut ordering = StreamOrder::default();
        let (a, b, c, x) = (StreamId(1), StreamId(2), StreamId(3), BufferId(1));
        ordering.issue(a, [(x, Access::Write)]);
        // b reads what a wrote: one wait, on a.
        let waits = ordering.needs(b, [(x, Access::Read)]);
        assert_eq!(
            waits.as_slice(),
            [Wait {
                stream: a,
                point: 1
            }]
        );
        ordering.waited(b, a);
        ordering.issue(b, [(x, Access::Read)]);
        // c waits for b and is so ordered after a too: a write of x needs
        // nothing more.
        ordering.waited(c, b);
        assert_eq!(ordering.ordered_after(c, a), 1);
        assert!(ordering.needs(c, [(x, Access::Write)]).is_empty());
        // a writes again after b's read: a must follow b's read.
        let waits = ordering.needs(a, [(x, Access::Write)]);
        assert_eq!(
            waits.as_slice(),
            [Wait {
                stream: b,
                point: 1
            }]
        );
        assert_eq!(ordering.users(x).as_slice(), [(a, 1), (b, 1)]);
        ordering.forget_stream(b);
        assert!(ordering.needs(a, [(x, Access::Write)]).is_empty());
        ordering.forget(x);
        assert!(ordering.users(x).is_empty());
    }
}
