//! What each runtime does for a row, behind one interface, so the rows are
//! timed the same way on both.

use std::time::Duration;

use crate::shared::rows::Row;

/// One runtime running the chain.
pub trait Side {
    /// The runtime and the device it runs on.
    fn describe(&self) -> String;
    /// Make the row's two buffers (zeros), run a warm pass, and capture a
    /// pass into a graph; returns how long the capture's end took (the
    /// call that turns the recording into a graph).
    fn setup(&mut self, row: Row) -> Result<Duration, String>;
    /// Issue one pass eagerly, without waiting.
    fn eager(&self);
    /// Issue one replay of the captured pass, without waiting.
    fn replay(&self);
    /// Wait until the device is past everything issued (by reading the
    /// first buffer back, on both sides).
    fn sync(&self);
    /// Both buffers' values.
    fn outputs(&mut self) -> Result<[Vec<f32>; 2], String>;
    /// Let go of the row's buffers and graph.
    fn teardown(&mut self);
}
