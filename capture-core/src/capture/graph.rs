//! Instantiated graphs, and windows that closed without one.

use std::sync::OnceLock;

use slab::Slab;

use crate::driver::GraphDriver;
use crate::error::Error;
use crate::hashing::FastMap;
use crate::ids::{BufferId, GraphId};
use crate::kernels::signature::Access;
use crate::memory::pool::{Place, SliceHandle};
use crate::recorded::dependencies::Dependencies;
use crate::recorded::entries::{Entry, GraphInfo};
use crate::streams::capturing::KeptKernel;

/// An instantiated graph, and everything its window pinned for it.
///
/// Lives inside the server, referenced by [`GraphId`]: nothing a client holds
/// can reach the executable, so it is only touched under the server's lock
/// and only destroyed after its stream was synced.
pub(crate) struct Graph<D: GraphDriver> {
    /// Declared first, so it drops before the kernels its work launches.
    pub(crate) exec: D::Executable,
    /// Every kernel the recording launched (rule 19): the user may drop
    /// their handles, and a backend unloads a kernel's code with the last.
    pub(crate) kernels: Vec<KeptKernel>,
    /// Every device and host slice the recording touched. A replay re-runs
    /// the recorded work against these exact addresses, and a recorded copy
    /// reads its host bytes again each time; holding them keeps the pools
    /// from handing that memory to a later allocation, even one made after
    /// the user dropped the buffer.
    pub(crate) _retained: Vec<SliceHandle>,
    /// Buffers the recorded work writes. A replay that fails to enqueue runs
    /// none of it, so each of these is claimed by that failure.
    pub(crate) written: Vec<BufferId>,
    /// Buffers the recorded work writes all of: a replay that succeeds
    /// clears their claims (a write to a view leaves the rest claimed).
    pub(crate) renewed: Vec<BufferId>,
    /// Buffers the recorded work reads. A replay over a claimed one would
    /// compute from bytes nobody wrote, so it is refused.
    pub(crate) read: Vec<BufferId>,
    /// What the recording did, in order.
    pub(crate) log: Vec<Entry>,
    /// Its temporaries, each where it lies in its stream's arena: memory
    /// the stream's other graphs' temporaries share.
    pub(crate) temporaries: Vec<(BufferId, Place)>,
    /// Temporaries of other graphs that their callers kept, in memory this
    /// graph's temporaries share: each replay overwrites them, so each is
    /// claimed by it (and counted in `written`, for the order of streams).
    pub(crate) clobbers: Vec<BufferId>,
    /// What the graph is and has done.
    pub(crate) info: GraphInfo,
    /// Its dependency graph, once asked for.
    pub(crate) dependencies: OnceLock<Dependencies>,
}

impl<D: GraphDriver> Graph<D> {
    /// What a replay does to each buffer, as the stream order counts it: a
    /// buffer read and written is both.
    pub(crate) fn accesses(&self) -> impl Iterator<Item = (BufferId, Access)> + Clone + '_ {
        let written = self.written.iter().map(|&b| (b, Access::Write));
        written.chain(self.read.iter().map(|&b| (b, Access::Read)))
    }

    /// What the recording did, in order.
    pub(crate) fn log(&self) -> &[Entry] {
        &self.log
    }

    /// What the graph is and has done.
    pub(crate) fn info(&self) -> GraphInfo {
        let dependencies = self.dependencies();
        GraphInfo {
            edges: dependencies.edges.len(),
            depth: dependencies.depth,
            width: dependencies.width,
            ..self.info
        }
    }

    /// The dependency graph of its recording: the one its executable keeps,
    /// or, for a graph replayed as a chain, computed on first asking.
    pub(crate) fn dependencies(&self) -> &Dependencies {
        self.dependencies
            .get_or_init(|| Dependencies::of(&self.log))
    }

    /// The counts and bytes of a (new) recording, and its dependency graph
    /// where instantiating computed it.
    pub(crate) fn measure(&mut self, dependencies: Option<Dependencies>) {
        let (launches, copies, conditionals) = Entry::count(&self.log);
        self.info.launches = launches;
        self.info.copies = copies;
        self.info.conditionals = conditionals;
        self.dependencies = dependencies.map_or_else(OnceLock::new, OnceLock::from);
    }
}

/// A capture window that closed without a graph.
///
/// Not only an error: the recorded work never ran and never will, so the
/// buffers it would have written hold whatever they held before. The window
/// has no failure store to claim them in, so it says what to claim and why;
/// the server claims them before a read can return those bytes as fresh.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// Why no graph came out.
    pub error: Error,
    /// The buffers the recording's work would have written.
    pub written: Vec<BufferId>,
}

/// Where a live graph lies in its stream's [`Captures`]: kept by the graph's
/// handle, so that a replay finds the graph by index instead of hashing its
/// id. A place is reused once its graph goes, so what is found there is
/// taken only if it is the same graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GraphKey(usize);

/// The graphs of one stream, by id, and by the place a graph handle kept.
pub(crate) struct Captures<D: GraphDriver> {
    /// The graphs, each with its id (a place is reused, an id never is).
    table: Slab<(GraphId, Graph<D>)>,
    /// Each graph's place in `table`.
    keys: FastMap<GraphId, usize>,
}

impl<D: GraphDriver> Default for Captures<D> {
    fn default() -> Self {
        Self {
            table: Slab::new(),
            keys: FastMap::default(),
        }
    }
}

impl<D: GraphDriver> Captures<D> {
    /// Register a graph under `id` (not yet held); where it lies.
    pub(crate) fn insert(&mut self, id: GraphId, graph: Graph<D>) -> GraphKey {
        // Ids are counters, handed out once: `id` is not held yet.
        let key = self.table.insert((id, graph));
        self.keys.insert(id, key);
        GraphKey(key)
    }

    /// Every live graph.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Graph<D>> {
        self.table.iter_mut().map(|(_, (_, graph))| graph)
    }

    /// The live graph `id`.
    pub(crate) fn get(&self, id: GraphId) -> Option<&Graph<D>> {
        let key = *self.keys.get(&id)?;
        self.table.get(key).map(|(_, graph)| graph)
    }

    /// The live graph `id`, to update.
    pub(crate) fn get_mut(&mut self, id: GraphId) -> Option<&mut Graph<D>> {
        let key = *self.keys.get(&id)?;
        self.table.get_mut(key).map(|(_, graph)| graph)
    }

    /// The live graph `id`, found at `key` (where it was registered)
    /// without hashing; `None` once it is gone, whatever lies there since.
    #[inline]
    pub(crate) fn at_mut(&mut self, key: GraphKey, id: GraphId) -> Option<&mut Graph<D>> {
        match self.table.get_mut(key.0) {
            Some((held, graph)) if *held == id => Some(graph),
            _ => None,
        }
    }

    /// Whether `id` names a live graph.
    pub(crate) fn contains(&self, id: GraphId) -> bool {
        self.keys.contains_key(&id)
    }

    /// Take graph `id` out, to be dropped once its stream is synced. `None`
    /// for an unknown id, which makes a double destroy a no-op.
    pub(crate) fn remove(&mut self, id: GraphId) -> Option<Graph<D>> {
        let key = self.keys.remove(&id)?;
        self.table.try_remove(key).map(|(_, graph)| graph)
    }

    /// The ids of every graph held.
    pub(crate) fn ids(&self) -> Vec<GraphId> {
        self.keys.keys().copied().collect()
    }
}
