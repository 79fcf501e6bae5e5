//! The runs stub (a `libcuda.so.1` whose graphs run on host memory), shared
//! by the tests that run against it: where it lies, a test run again in a
//! child with it first on the library path (a driver library, once loaded,
//! stays loaded for the life of a process), and its functions by name.

use std::env;
use std::process::Command;

use backend_cuda::DEVICE_ENV;

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
