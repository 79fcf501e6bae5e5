//! backend-cuda (in progress).
