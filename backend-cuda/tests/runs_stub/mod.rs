//! The runs stub (a `libcuda.so.1` whose graphs run on host memory), shared
//! by the tests that run against it: where it lies, a test run again in a
//! child with it first on the library path (a driver library, once loaded,
//! stays loaded for the life of a process), its functions by name, and
//! what a program using the driver itself does through it (its own
//! contexts made current, memory, streams; the stub's kernels and the
//! edges of its last graph). Each test binary uses part of it.
#![allow(dead_code)]

use std::env;
use std::ffi::{CString, c_char};
use std::process::Command;

use backend_cuda::{CUcontext, CUdeviceptr, CUfunction, CUstream, DEVICE_ENV};

/// Where the stub lies when the test binary runs on another machine than
/// it was built on (the GPU bundle ships the stubs).
const STUB_DIR_ENV: &str = "CAPTURE_CUDA_TEST_RUNS_STUB_DIR";

/// The stub's settings a child starts without, unless its test sets them.
const SETTINGS: [&str; 7] = [
    "CUDA_STUB_DEFER",
    "CUDA_STUB_DEVICE_COUNT",
    "CUDA_STUB_DRIVER_VERSION",
    "CUDA_STUB_EDGE_DATA",
    "CUDA_STUB_INVALIDATE_BODY",
    "CUDA_STUB_MODULE_RESULT",
    "CUDA_STUB_SETTER_RESULT",
];

/// A test binary's children: the variable that marks a process as one, and
/// the line a child prints once its test finished.
pub struct Children {
    pub marker: &'static str,
    pub done: &'static str,
}

impl Children {
    /// Whether this process is a child.
    pub fn inside(&self) -> bool {
        env::var_os(self.marker).is_some()
    }

    /// Run `test` again in a child with the stub of `dir` first on the
    /// library path and `vars` set, and check that it finished.
    pub fn run(&self, test: &str, dir: &str, vars: &[(&str, &str)]) {
        let exe = env::current_exe().expect("the test binary knows its path");
        let mut command = Command::new(exe);
        command
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(self.marker, "1")
            .env("LD_LIBRARY_PATH", dir)
            .env_remove(DEVICE_ENV);
        for setting in SETTINGS {
            command.env_remove(setting);
        }
        let output = command
            .envs(vars.iter().copied())
            .output()
            .expect("the test binary runs again");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains(self.done),
            "the child failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
    }
}

/// The stub's directory, or that of the variant `name` built inside it.
pub fn stub_dir(variant: Option<&str>) -> String {
    let dir = env::var(STUB_DIR_ENV)
        .ok()
        .or(backend_cuda::TEST_RUNS_STUB_DIR.map(str::to_owned))
        .unwrap_or_else(|| {
            panic!(
                "the stub libcuda.so.1 was not built, so this test cannot run; the build script \
                 needs a working C compiler (see its warning in the build output)"
            )
        });
    match variant {
        Some(name) => std::path::Path::new(&dir)
            .join(name)
            .to_string_lossy()
            .into_owned(),
        None => dir,
    }
}

/// One of the stub's functions, of type `T`.
///
/// # Safety
///
/// `T` is the function's type in the stub.
pub unsafe fn stub_fn<T: Copy>(name: &str) -> T {
    let symbol = format!("{name}\0");
    // SAFETY: the library is the stub, which stays loaded (the handle is
    // leaked, so that a call made before the backend loads it still finds
    // it there); the caller promises the type.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub loads");
        let function = *library
            .get::<T>(symbol.as_bytes())
            .unwrap_or_else(|e| panic!("the stub exports {name}: {e}"));
        std::mem::forget(library);
        function
    }
}

/// One of the stub's `cuStub*` functions that take nothing and return an
/// int.
pub fn stub_int(name: &str) -> i32 {
    // SAFETY: every function named here is `int f(void)`.
    let function = unsafe { stub_fn::<unsafe extern "C" fn() -> i32>(name) };
    // SAFETY: it takes nothing.
    unsafe { function() }
}

/// Run `f` with `context` current, as a program using the driver itself.
pub fn in_context<R>(context: CUcontext, f: impl FnOnce() -> R) -> R {
    // SAFETY: the stub's push and pop take and give a context handle.
    let push = unsafe { stub_fn::<unsafe extern "C" fn(CUcontext) -> i32>("cuCtxPushCurrent_v2") };
    // SAFETY: as above.
    let pop =
        unsafe { stub_fn::<unsafe extern "C" fn(*mut CUcontext) -> i32>("cuCtxPopCurrent_v2") };
    // SAFETY: a context the stub handed out.
    assert_eq!(unsafe { push(context) }, 0, "push the context");
    let result = f();
    let mut popped: CUcontext = std::ptr::null_mut();
    // SAFETY: a valid place for the handle.
    assert_eq!(unsafe { pop(&mut popped) }, 0, "pop the context");
    result
}

/// `bytes` of device memory allocated in `context` by the caller's own
/// `cuMemAlloc_v2`, as another library would.
pub fn raw_alloc(context: CUcontext, bytes: usize) -> CUdeviceptr {
    // SAFETY: `cuMemAlloc_v2(CUdeviceptr*, size_t)`.
    let alloc =
        unsafe { stub_fn::<unsafe extern "C" fn(*mut CUdeviceptr, usize) -> i32>("cuMemAlloc_v2") };
    let mut pointer: CUdeviceptr = 0;
    let code = in_context(context, || {
        // SAFETY: a valid place for the address.
        unsafe { alloc(&mut pointer, bytes) }
    });
    assert_eq!(code, 0);
    pointer
}

/// A non-blocking stream made in `context` by the caller's own
/// `cuStreamCreate`.
pub fn raw_stream(context: CUcontext) -> CUstream {
    raw_stream_with(context, 1)
}

/// A stream made in `context` by the caller's own `cuStreamCreate`, with
/// `flags`.
pub fn raw_stream_with(context: CUcontext, flags: u32) -> CUstream {
    // SAFETY: `cuStreamCreate(CUstream*, unsigned)`.
    let create =
        unsafe { stub_fn::<unsafe extern "C" fn(*mut CUstream, u32) -> i32>("cuStreamCreate") };
    let mut stream: CUstream = std::ptr::null_mut();
    let code = in_context(context, || {
        // SAFETY: a valid place for the handle.
        unsafe { create(&mut stream, flags) }
    });
    assert_eq!(code, 0);
    stream
}

/// One of the stub's kernels (`fill`, `add`, `narrow`, `countdown`).
pub fn stub_function(name: &str) -> CUfunction {
    // SAFETY: `void* cuStubFunction(const char*)`.
    let function =
        unsafe { stub_fn::<unsafe extern "C" fn(*const c_char) -> CUfunction>("cuStubFunction") };
    let name = CString::new(name).expect("no NUL");
    // SAFETY: a NUL-terminated name.
    let found = unsafe { function(name.as_ptr()) };
    assert!(!found.is_null(), "the stub has no {name:?}");
    found
}

/// The edges of the graph the stub last instantiated or updated from, as
/// node positions in creation order, sorted.
pub fn stub_edges() -> Vec<(usize, usize)> {
    const MAX: usize = 64;
    type Edges = unsafe extern "C" fn(*mut usize, *mut usize, usize) -> usize;
    let (mut from, mut to) = ([0usize; MAX], [0usize; MAX]);
    // SAFETY: cuStubGraphEdges takes two arrays of `MAX` size_t and their
    // length, and writes at most that many.
    let count =
        unsafe { stub_fn::<Edges>("cuStubGraphEdges")(from.as_mut_ptr(), to.as_mut_ptr(), MAX) };
    assert!(count <= MAX, "the stub holds {count} edges");
    let mut edges: Vec<(usize, usize)> = from[..count]
        .iter()
        .copied()
        .zip(to[..count].iter().copied())
        .collect();
    edges.sort_unstable();
    edges
}
