//! How to use the library, one section per topic. Every example runs as a
//! test on the host backend; a GPU backend's client is opened the same way.
