//! What every clone of a client shares: the device and its server.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::driver::GraphDriver;
use crate::server::Server;

pub(crate) struct Shared<D: GraphDriver> {
    pub(crate) server: Server<D>,
    pub(crate) device: Arc<D::Device>,
    /// Which client this is: buffers carry it, so another client's buffer,
    /// whose ids and offsets mean nothing here, is refused.
    pub(crate) id: u64,
}

/// Numbers clients, for [`Shared::id`].
pub(crate) static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);
