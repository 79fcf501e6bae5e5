//! A graph as the user holds it: the last drop destroys it.

use super::shared::Shared;

use std::sync::{Arc, Weak};

use crate::capture::graph::GraphKey;
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::{GraphId, StreamId};
use crate::server::StreamRef;

/// A graph. Clones share it; the last drop destroys it after syncing its
/// stream (deferred until the window closes if that stream is recording).
pub struct GraphHandle<D: GraphDriver> {
    pub(crate) inner: Arc<GraphInner<D>>,
}

pub(crate) struct GraphInner<D: GraphDriver> {
    pub(crate) id: GraphId,
    /// Where its stream holds it.
    pub(crate) key: GraphKey,
    pub(crate) stream: StreamId,
    /// Its stream, kept: a replay finds it without the device's map.
    pub(crate) at: StreamRef<D>,
    pub(crate) shared: Weak<Shared<D>>,
}

impl<D: GraphDriver> Clone for GraphHandle<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<D: GraphDriver> std::fmt::Debug for GraphHandle<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphHandle({}, {})", self.inner.id, self.inner.stream)
    }
}

impl<D: GraphDriver> GraphHandle<D> {
    /// The graph's id.
    pub fn id(&self) -> GraphId {
        self.inner.id
    }

    /// The stream it replays on.
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }
}

impl<D: GraphDriver> GraphHandle<D> {
    /// Enqueue the graph's recorded work on its stream: the same as
    /// [`Client::replay`](crate::Client::replay) with this graph.
    ///
    /// # Errors
    ///
    /// As [`Client::replay`](crate::Client::replay); [`Error::UnknownGraph`] once the client is
    /// gone.
    pub fn replay(&self) -> Result<(), Error> {
        let Some(shared) = self.inner.shared.upgrade() else {
            return Err(Error::UnknownGraph(self.inner.id));
        };
        let inner = &*self.inner;
        shared
            .server
            .replay_at(inner.id, inner.key, inner.stream, &inner.at)
    }
}

impl<D: GraphDriver> Drop for GraphInner<D> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.server.destroy_graph(self.id);
        }
    }
}
