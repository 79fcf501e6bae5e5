//! Identifiers that cross the client/server boundary. Numbers, not pointers,
//! so nothing a client holds can reach an executable or a page directly.

use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, " {}"), self.0)
            }
        }
    };
}

id!(
    /// A stream of one device.
    StreamId,
    "stream"
);
id!(
    /// One allocation. Never reused, so a failure claimed on it can never
    /// attach to a later allocation that lands on the same memory.
    BufferId,
    "buffer"
);
id!(
    /// An instantiated graph.
    GraphId,
    "graph"
);
id!(
    /// One capture window, from `prepare` to `instantiate`.
    WindowId,
    "window"
);
