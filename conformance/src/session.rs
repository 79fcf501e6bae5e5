//! What a scenario runs against: one opened device, and clients over it.

use crate::workload::UserKernels;
use std::sync::Arc;

use capture_core::{Client, Config, Driver};

use crate::faulty::{FaultPlan, Faulty, FaultyDevice};

/// The device a scenario runs on, opened once by the runner so that it can
/// inspect the device after the scenario (Vulkan's validation counters, say).
pub struct Session<D: Driver> {
    device: Arc<D::Device>,
}

impl<D: UserKernels> Session<D> {
    /// A session on an opened device.
    pub fn new(device: Arc<D::Device>) -> Self {
        Self { device }
    }

    /// The device.
    pub fn device(&self) -> &Arc<D::Device> {
        &self.device
    }

    /// A client with default sizes.
    pub fn client(&self) -> Client<D> {
        self.client_with(Config::default())
    }

    /// A client with `config`'s sizes.
    pub fn client_with(&self, config: Config) -> Client<D> {
        Client::with_device(self.device.clone(), config)
    }

    /// A client whose driver fails where the returned plan says.
    pub fn faulty(&self) -> (Client<Faulty<D>>, Arc<FaultPlan>) {
        self.faulty_with(Config::default())
    }

    /// A faulty client with `config`'s sizes.
    pub fn faulty_with(&self, config: Config) -> (Client<Faulty<D>>, Arc<FaultPlan>) {
        let device = FaultyDevice::<D>::wrap(self.device.clone());
        let plan = device.plan().clone();
        (Client::with_device(device, config), plan)
    }
}
