//! Benches (in progress).
