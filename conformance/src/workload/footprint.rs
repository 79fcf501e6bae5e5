//! What a stream's device pool and a graph hold, against what their user
//! holds and what the recording touched: the memory figures of the decode
//! step and of the benches' long capture.

use graph_capture::{Client, Error, GraphDriver, GraphHandle, StreamId};

/// What a stream's device pool holds against what its user holds, and what
/// a graph pins against what its recording touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footprint {
    /// Bytes of every device page the stream's pool obtained.
    pub reserved_bytes: u64,
    /// Bytes of the buffers the caller holds, as requested.
    pub live_bytes: u64,
    /// Device bytes the graph pins.
    pub pinned_bytes: u64,
    /// Bytes of the buffers the graph's recording touched, as requested.
    pub touched_bytes: u64,
}

impl Footprint {
    /// `stream`'s pool and `graph` on `client`, against `live_bytes` the
    /// caller holds.
    pub fn of<D: GraphDriver>(
        client: &Client<D>,
        stream: StreamId,
        graph: &GraphHandle<D>,
        live_bytes: u64,
    ) -> Result<Self, Error> {
        let info = client.graph_info(graph)?;
        Ok(Self {
            reserved_bytes: client.usage(stream)?.device.reserved_bytes,
            live_bytes,
            pinned_bytes: info.device_bytes,
            touched_bytes: info.touched_bytes,
        })
    }

    /// Pool bytes per byte of live buffers.
    pub fn reserved_per_live(&self) -> f64 {
        self.reserved_bytes as f64 / self.live_bytes.max(1) as f64
    }

    /// Pinned bytes per byte the recording touched.
    pub fn pinned_per_touched(&self) -> f64 {
        self.pinned_bytes as f64 / self.touched_bytes.max(1) as f64
    }
}
