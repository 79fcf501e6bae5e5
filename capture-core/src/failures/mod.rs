//! Failures as data: which buffers hold no valid bytes because an operation
//! that was to write them failed or was refused, and why. A read of such a
//! buffer fails with the cause, on any stream, until a good write clears it.
//!
//! Uses the crate's errors and ids alone.

pub(crate) mod claims;
