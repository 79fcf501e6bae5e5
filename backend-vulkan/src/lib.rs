//! backend-vulkan (in progress).
