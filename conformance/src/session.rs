//! What a scenario runs against: one opened device, and clients over it.

use crate::workload::UserKernels;
use std::sync::Arc;

use graph_capture::{Client, Config, Driver, ReplayOrder};

use crate::faulty::{FaultPlan, Faulty, FaultyDevice};

/// The device a scenario runs on, opened once by the runner so that it can
/// inspect the device after the scenario (Vulkan's validation counters, say),
/// and the order every client's graphs keep: the suite runs each scenario
/// both ways, and they must agree.
pub struct Session<D: Driver> {
    device: Arc<D::Device>,
    order: ReplayOrder,
}

impl<D: UserKernels> Session<D> {
    /// A session on an opened device, its graphs kept as dependency graphs.
    pub fn new(device: Arc<D::Device>) -> Self {
        Self::keeping(device, ReplayOrder::default())
    }

    /// A session on an opened device whose clients' graphs keep `order`.
    pub fn keeping(device: Arc<D::Device>, order: ReplayOrder) -> Self {
        Self { device, order }
    }

    /// The order the session's graphs keep.
    pub fn order(&self) -> ReplayOrder {
        self.order
    }

    /// The device.
    pub fn device(&self) -> &Arc<D::Device> {
        &self.device
    }

    /// A client with default sizes.
    pub fn client(&self) -> Client<D> {
        self.client_with(Config::default())
    }

    /// A client with `config`'s sizes, keeping the session's order.
    pub fn client_with(&self, config: Config) -> Client<D> {
        Client::with_device(self.device.clone(), self.keep(config))
    }

    /// `config` with the session's order.
    fn keep(&self, config: Config) -> Config {
        Config {
            replay_order: self.order,
            ..config
        }
    }

    /// A client whose driver fails where the returned plan says.
    pub fn faulty(&self) -> (Client<Faulty<D>>, Arc<FaultPlan>) {
        self.faulty_with(Config::default())
    }

    /// A faulty client with `config`'s sizes.
    pub fn faulty_with(&self, config: Config) -> (Client<Faulty<D>>, Arc<FaultPlan>) {
        let device = FaultyDevice::<D>::wrap(self.device.clone());
        let plan = device.plan().clone();
        (Client::with_device(device, self.keep(config)), plan)
    }
}
