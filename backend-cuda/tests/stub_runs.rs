//! The recording bookkeeping against the stub whose streams, events,
//! captures and memory work on host memory: frees wait for every recording
//! on the GPU, whichever `Device` opened it, and a stream replaced after a
//! capture left it recording is ordered after all its work.
//!
//! Each case runs in a child process (this test binary, run again with the
//! stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::env;
use std::process::Command;

use backend_cuda::{Cuda, DEVICE_ENV};
use capture_core::{DeviceSlice, Driver, GraphDriver, HostSlice};

const CHILD: &str = "BACKEND_CUDA_RUNS_CHILD";
const DONE: &str = "RUNS_CHILD_DONE";
/// Where the stub lies when the test binary runs on another machine than
/// it was built on (the GPU bundle ships the stubs).
const STUB_DIR_ENV: &str = "CAPTURE_CUDA_TEST_RUNS_STUB_DIR";

fn in_child() -> bool {
    env::var_os(CHILD).is_some()
}

/// Run `test` again in a child with the stub first on the library path,
/// and check that it finished.
fn in_stub(test: &str) {
    let dir = env::var(STUB_DIR_ENV)
        .ok()
        .or(backend_cuda::TEST_RUNS_STUB_DIR.map(str::to_owned));
    let Some(dir) = dir else {
        panic!(
            "the stub libcuda.so.1 was not built, so this test cannot run; the build script \
             needs a working C compiler (see its warning in the build output)"
        );
    };
    let exe = env::current_exe().expect("the test binary knows its path");
    let output = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove(DEVICE_ENV)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(DONE),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// One of the stub's `cuStub*` functions that take nothing and return an
/// int.
fn stub_int(name: &str) -> i32 {
    let symbol = format!("{name}\0");
    // SAFETY: the library is the stub this process already loaded (the same
    // name resolves to the same handle); each function named here takes
    // nothing and returns an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn() -> i32>(symbol.as_bytes())
            .expect("the stub exports it");
        function()
    }
}

/// Make the stub's next `cuStreamEndCapture` answer `code` and leave the
/// stream capturing.
fn fail_next_end(code: i32) {
    // SAFETY: as in `stub_int`; cuStubFailNextEnd takes an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(i32)>(b"cuStubFailNextEnd\0")
            .expect("the stub exports it");
        function(code);
    }
}

/// In the child: two `Device`s opened on one ordinal, a page of the second
/// released while a stream of the first records.
fn check_frees_wait_for_the_gpu() {
    let a = Cuda::open_index(0).expect("the stub opens device 0");
    let b = Cuda::open_index(0).expect("the stub opens device 0 again");
    let mut recording = Cuda::create_stream(&a).expect("a stream of A");
    let mut other = Cuda::create_stream(&b).expect("a stream of B");
    let device_page = Cuda::allocate_device_page(&mut other, 64).expect("a page of B");
    let host_page = Cuda::allocate_host_page(&mut other, 64).expect("a host page of B");
    Cuda::begin(&mut recording).expect("A records");
    let before = stub_int("cuStubReleases");
    Cuda::release_device_page(&mut other, device_page);
    Cuda::release_host_page(&mut other, host_page);
    assert_eq!(
        stub_int("cuStubReleases"),
        before,
        "a free through B ran while a stream of A recorded on the same GPU"
    );
    let graph = Cuda::end(&mut recording).expect("A's recording ends");
    assert_eq!(
        stub_int("cuStubReleases"),
        before + 2,
        "the frees held back run once the recording ends"
    );
    drop(graph);
    // With nothing recording, a free runs at once.
    let page = Cuda::allocate_device_page(&mut other, 64).expect("a page of B");
    Cuda::release_device_page(&mut other, page);
    assert_eq!(stub_int("cuStubReleases"), before + 3);
    println!("\n{DONE}");
}

#[test]
fn frees_through_one_device_wait_for_a_recording_on_another_of_the_same_gpu() {
    if in_child() {
        return check_frees_wait_for_the_gpu();
    }
    in_stub("frees_through_one_device_wait_for_a_recording_on_another_of_the_same_gpu");
}

/// In the child: work enqueued after the latest signal, then a capture
/// whose end fails and leaves the stream capturing.
fn check_replacement_is_ordered() {
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let mut stream = Cuda::create_stream(&device).expect("a stream");
    let host = Cuda::allocate_host_page(&mut stream, 64).expect("a host page");
    let page = Cuda::allocate_device_page(&mut stream, 64).expect("a device page");
    let copy = |stream: &mut _| {
        Cuda::copy_to_device(
            stream,
            HostSlice::<Cuda> {
                page: &host,
                offset: 0,
                len: 64,
            },
            DeviceSlice::<Cuda> {
                page: &page,
                offset: 0,
                len: 64,
            },
        )
        .expect("the copy is enqueued");
    };
    copy(&mut stream);
    Cuda::signal(&mut stream).expect("a signal");
    // Enqueued after the latest signal: only a point taken later covers it.
    copy(&mut stream);
    Cuda::begin(&mut stream).expect("the stream records");
    // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    fail_next_end(901);
    let refused = Cuda::end(&mut stream).expect_err("the end fails");
    assert!(refused.message.contains("replaced"), "{refused}");
    assert_eq!(
        stub_int("cuStubReplacedCovered"),
        1,
        "the fresh stream did not wait for all the old stream's work"
    );
    // The fresh stream runs work.
    copy(&mut stream);
    Cuda::release_device_page(&mut stream, page);
    Cuda::release_host_page(&mut stream, host);
    println!("\n{DONE}");
}

#[test]
fn a_replacement_stream_waits_for_all_the_old_streams_work() {
    if in_child() {
        return check_replacement_is_ordered();
    }
    in_stub("a_replacement_stream_waits_for_all_the_old_streams_work");
}
