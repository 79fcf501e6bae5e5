//! backend-host (in progress).
