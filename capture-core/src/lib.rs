//! Backend-neutral bookkeeping for recording a GPU stream's launches once and
//! replaying them many times.
#![forbid(unsafe_code)]

pub mod builtin;
pub mod driver;
pub mod error;
pub mod ids;

pub use builtin::{Builtin, BuiltinInfo, Builtins};
pub use driver::{
    Access, Availability, Binding, DeviceInfo, DeviceSlice, Driver, DriverError, GraphDriver,
    HostSlice, Launch,
};
pub use error::{Error, Result};
pub use ids::{BufferId, GraphId, StreamId, WindowId};
