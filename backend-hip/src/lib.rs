//! backend-hip (in progress).
