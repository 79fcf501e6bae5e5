//! The raw driver under the core's own memory and executables, for the
//! benches that measure the core against it (feature `raw`).

use smallvec::SmallVec;

use super::{BufferRef, Lane, Server};
use crate::driver::{DeviceSlice, GraphDriver};
use crate::error::Error;
use crate::ids::{GraphId, StreamId};

impl<D: GraphDriver> Server<D> {
    /// Call `f` with graph `id`'s executable and its stream's driver stream,
    /// under the stream's lock: how a benchmark measures the raw driver's
    /// replay of the very executable the core replays. `f` runs under the
    /// lock, so it must not call back into the client on that stream (nor
    /// drop a graph handle of it, whose drop does).
    pub fn with_raw_graph<R>(
        &self,
        id: GraphId,
        f: impl FnOnce(&D::Executable, &mut D::Stream) -> R,
    ) -> Result<R, Error> {
        let stream = self.stream_of(id).ok_or(Error::UnknownGraph(id))?;
        self.with(stream, |lane| {
            let Lane { state, graphs, .. } = lane;
            let graph = graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(f(&graph.exec, &mut state.raw))
        })
    }

    /// Call `f` with `stream`'s driver stream and the device slices of
    /// `buffers`: how a benchmark issues the raw driver's launch on the very
    /// memory the core uses. Under the stream's lock, as for
    /// [`Server::with_raw_graph`].
    pub fn with_raw_stream<R>(
        &self,
        stream: StreamId,
        buffers: &[BufferRef<'_>],
        f: impl FnOnce(&mut D::Stream, &[DeviceSlice<'_, D>]) -> R,
    ) -> Result<R, Error> {
        // The raw stream reaches only its own pool, and bypasses the order
        // of buffers other streams use.
        if let Some(other) = buffers.iter().find(|b| b.stream != stream) {
            return Err(Error::BadLaunch(format!(
                "{} lies in {}'s pool; the raw driver of {stream} reaches only its own",
                other.slice.id(),
                other.stream
            )));
        }
        self.with(stream, |lane| {
            let state = &mut lane.state;
            let mut slices: SmallVec<[DeviceSlice<'_, D>; 8]> = SmallVec::new();
            for buffer in buffers {
                let page = state
                    .device
                    .page(buffer.slice)
                    .ok_or(Error::UnknownStream(stream))?;
                slices.push(DeviceSlice {
                    page,
                    offset: buffer.slice.offset(),
                    len: buffer.slice.len(),
                });
            }
            Ok(f(&mut state.raw, &slices))
        })
    }
}
