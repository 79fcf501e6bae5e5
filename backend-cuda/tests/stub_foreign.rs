//! Foreign operations against the stub whose graphs run on host memory: a
//! caller's own driver calls (`cuMemcpyDtoDAsync_v2`) run at once on the
//! stream, and inside a window become one child graph node each, placed in
//! the dependency graph by their declared buffers and run on every replay;
//! a re-capture updates such a graph in place. Failing and panicking code
//! refuses the call, dooms its window and claims what it declared written;
//! inside a conditional body the node runs on the flag's word, and code
//! panicking there refuses the capture and leaves the stream able to
//! capture again; and a driver
//! without the capture functions of 12.3 refuses a foreign operation in a
//! window, with the reason, while running it at once still works.
//!
//! Each case runs in a child process (this test binary, run again with the
//! stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use backend_cuda::{CUdeviceptr, CUstream, Cuda, Device, ForeignStream, Kernel};
use capture_core::{
    Access, Buffer, Builtin, BuiltinInfo, Client, Config, Driver, Error, Ran, StreamId, Update,
};

mod runs_stub;
use runs_stub::{
    Children, raw_alloc, raw_stream, stub_dir, stub_edges, stub_fn, stub_function, stub_int,
};

const DONE: &str = "FOREIGN_CHILD_DONE";
const CHILDREN: Children = Children {
    marker: "BACKEND_CUDA_FOREIGN_CHILD",
    done: DONE,
};

/// Elements of the test's float buffers.
const N: usize = 64;

fn in_child() -> bool {
    CHILDREN.inside()
}

/// What one call of a foreign operation was handed: whether its stream
/// was capturing, and each buffer's length and access.
type Seen = Arc<Mutex<Vec<(bool, Vec<(u64, Access)>)>>>;

/// `cuMemcpyDtoDAsync_v2`, as the stub exports it.
type CopyFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> i32;

/// A foreign operation copying `from` (or, with `None`, its first buffer)
/// into its last buffer with the driver's own copy, noting what it was
/// handed in `seen`.
fn copy_op(
    device: &Arc<Device>,
    name: &str,
    accesses: &[Access],
    from: Option<CUdeviceptr>,
    seen: &Seen,
) -> capture_core::Kernel<Cuda> {
    // SAFETY: the stub's prototype of cuMemcpyDtoDAsync_v2.
    let copy = unsafe { stub_fn::<CopyFn>("cuMemcpyDtoDAsync_v2") };
    let seen = Arc::clone(seen);
    let op = move |s: &ForeignStream<'_>| {
        seen.lock().unwrap_or_else(PoisonError::into_inner).push((
            s.capturing,
            s.buffers.iter().map(|b| (b.len, b.access)).collect(),
        ));
        let dst = s.buffers.last().ok_or("no buffer")?;
        let src = from.unwrap_or(s.buffers[0].address);
        // SAFETY: both ranges hold `dst.len` bytes (the source is the first
        // declared buffer, as long, or the caller's own of N floats), on
        // the stream handed over.
        let code = unsafe { copy(dst.address, src, dst.len as usize, s.stream) };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("cuMemcpyDtoDAsync_v2 answered {code}"))
        }
    };
    // SAFETY: the copy writes the last declared range only, reads the first
    // (or memory of the caller's nobody writes), on the stream it is given.
    let kernel = unsafe { Kernel::foreign(device, name, accesses, op) };
    capture_core::Kernel::new(kernel.expect("a foreign operation"))
}

/// A foreign operation whose code fails (`Err`) or panics.
fn failing_op(device: &Arc<Device>, panics: bool) -> capture_core::Kernel<Cuda> {
    let op = move |_: &ForeignStream<'_>| {
        if panics {
            panic!("deliberate panic in a foreign operation");
        }
        Err("the foreign operation refuses".to_owned())
    };
    // SAFETY: it enqueues nothing.
    let kernel = unsafe { Kernel::foreign(device, "fails", &[Access::Write], op) };
    capture_core::Kernel::new(kernel.expect("a foreign operation"))
}

/// Keep the test's own deliberate panics off stderr.
fn quiet_deliberate_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("deliberate panic") {
            report(info);
        }
    }));
}

/// The stub's add kernel, with the builtin's signature.
fn add_kernel(device: &Arc<Device>) -> capture_core::Kernel<Cuda> {
    // SAFETY: the stub's add takes the builtin's parameters and touches the
    // first n elements of each buffer; every launch passes an n that fits.
    let kernel =
        unsafe { Kernel::from_raw(device, stub_function("add"), Builtin::Add.signature(), ()) };
    capture_core::Kernel::new(kernel.expect("a kernel over the stub's function"))
}

/// Memory of the caller's own in `device`'s context, `N` floats of
/// `value`.
fn caller_floats(device: &Device, value: f32) -> CUdeviceptr {
    let pointer = raw_alloc(device.raw_context(), N * 4);
    let bytes: Vec<u8> = std::iter::repeat_n(value.to_le_bytes(), N)
        .flatten()
        .collect();
    // SAFETY: the stub's device memory is host memory of N floats here,
    // the caller's, used by nobody else.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), pointer as usize as *mut u8, bytes.len())
    };
    pointer
}

struct Rig {
    client: Client<Cuda>,
    stream: StreamId,
    device: Arc<Device>,
    add: capture_core::Kernel<Cuda>,
}

impl Rig {
    fn new() -> Self {
        let device = Cuda::open_index(0).expect("the stub opens device 0");
        let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
        let stream = client.create_stream().expect("a stream");
        Self {
            add: add_kernel(&device),
            client,
            stream,
            device,
        }
    }

    fn floats(&self, value: f32) -> Buffer {
        self.client
            .create_f32(self.stream, &[value; N])
            .expect("a buffer")
    }

    fn add(&self, to: &Buffer, what: &Buffer) -> Result<(), Error> {
        let info = BuiltinInfo::new(N as u32, 0.0).to_bytes();
        self.client
            .launch(self.stream, &self.add, [1, 1, 1], &[to, what], &info, &[])
    }

    /// A foreign operation copying fives of the caller's own into its one
    /// buffer, noting what it was handed in `seen`.
    fn fill_five(&self, seen: &Seen) -> capture_core::Kernel<Cuda> {
        let fives = caller_floats(&self.device, 5.0);
        copy_op(
            &self.device,
            "fill_five",
            &[Access::Write],
            Some(fives),
            seen,
        )
    }

    /// Every element of `buffer`, which must all be equal.
    fn value(&self, buffer: &Buffer) -> f32 {
        let values = self.client.read_f32(buffer).expect("read floats");
        assert!(values.iter().all(|&v| v == values[0]), "{values:?}");
        values[0]
    }
}

/// In the child: run at once, then as child graph nodes in the dependency
/// graph, replayed and updated in place.
fn check_runs() {
    let rig = Rig::new();
    let (client, stream) = (&rig.client, rig.stream);
    let seen: Seen = Arc::default();
    let copy = copy_op(
        &rig.device,
        "copy",
        &[Access::Read, Access::Write],
        None,
        &seen,
    );
    let fill = rig.fill_five(&seen);
    let (x, one, y, z) = (
        rig.floats(1.0),
        rig.floats(1.0),
        rig.floats(0.0),
        rig.floats(0.0),
    );

    client.foreign(stream, &copy, &[&x, &y]).expect("at once");
    assert_eq!(rig.value(&y), 1.0, "the copy ran on the stream");
    assert_eq!(
        seen.lock().unwrap().pop(),
        Some((
            false,
            vec![
                ((N * 4) as u64, Access::Read),
                ((N * 4) as u64, Access::Write)
            ]
        )),
        "handed the stream, not capturing, and both buffers as declared"
    );

    let children = stub_int("cuStubChildGraphNodes");
    let destroyed = stub_int("cuStubGraphsDestroyed");
    let body = || -> Result<(), Error> {
        rig.add(&x, &one)?; // 0: x += 1
        client.foreign(stream, &fill, &[&z])?; // 1: z = 5
        client.foreign(stream, &copy, &[&x, &y])?; // 2: y = x, after 0
        rig.add(&z, &one) // 3: z += 1, after 1
    };
    let (graph, ()) = client.capture(stream, |_| body()).expect("captured");
    assert!(
        seen.lock().unwrap().iter().any(|(capturing, _)| *capturing),
        "inside the window the stream handed over captures"
    );
    assert_eq!(
        stub_int("cuStubChildGraphNodes") - children,
        2,
        "one child graph node per foreign operation"
    );
    assert_eq!(
        stub_int("cuStubGraphsDestroyed") - destroyed,
        3,
        "each operation's own graph destroyed once copied, and the recording once instantiated"
    );
    assert_eq!(
        stub_edges(),
        [(0, 2), (1, 3)],
        "each foreign node follows what it reads and precedes what needs it, no chain"
    );
    assert_eq!(
        (rig.value(&x), rig.value(&y), rig.value(&z)),
        (2.0, 2.0, 6.0),
        "the warmup"
    );
    for round in 1..=3 {
        client.replay(&graph).expect("replay");
        client.sync(stream).expect("sync");
        let x_now = 2.0 + round as f32;
        assert_eq!(
            (rig.value(&x), rig.value(&y), rig.value(&z)),
            (x_now, x_now, 6.0),
            "replay {round}"
        );
    }

    let (update, ()) = client.recapture(&graph, |_| body()).expect("recaptured");
    assert_eq!(
        update,
        Update::InPlace,
        "the same child graphs update in place"
    );
    client.write_f32(&z, &[0.0; N]).expect("clear z");
    client.replay(&graph).expect("replay");
    client.sync(stream).expect("sync");
    assert_eq!(
        (rig.value(&x), rig.value(&y), rig.value(&z)),
        (7.0, 7.0, 6.0)
    );
    println!("\n{DONE}");
}

#[test]
fn foreign_work_runs_at_once_and_as_child_graph_nodes_in_the_dependency_graph() {
    if in_child() {
        return check_runs();
    }
    CHILDREN.run(
        "foreign_work_runs_at_once_and_as_child_graph_nodes_in_the_dependency_graph",
        &stub_dir(None),
        &[],
    );
}

/// In the child: failing and panicking code, at once and in a window.
fn check_failures() {
    quiet_deliberate_panics();
    let rig = Rig::new();
    let (client, stream) = (&rig.client, rig.stream);
    for (panics, says) in [(false, "refuses"), (true, "panicked")] {
        let op = failing_op(&rig.device, panics);
        let dst = rig.floats(0.0);
        let err = client
            .foreign(stream, &op, &[&dst])
            .expect_err("refused at once");
        assert!(err.to_string().contains(says), "{err}");
        let read = client.read(&dst).expect_err("claimed");
        assert!(matches!(read, Error::Claimed { .. }), "{read}");

        let other = rig.floats(1.0);
        let one = rig.floats(1.0);
        rig.add(&other, &one)
            .expect("its info bytes met before the window");
        let window = client.prepare(stream).expect("prepare");
        client.begin(stream, window).expect("begin");
        rig.add(&other, &one).expect("a launch before it");
        let err = client
            .foreign(stream, &op, &[&other])
            .expect_err("refused in the window");
        assert!(err.to_string().contains(says), "{err}");
        let err = client
            .instantiate(stream, window)
            .expect_err("the window is doomed");
        assert!(
            err.to_string().contains(says),
            "the instantiate says why: {err}"
        );
        let read = client
            .read(&other)
            .expect_err("what the window wrote is claimed");
        assert!(matches!(read, Error::Claimed { .. }), "{read}");

        let a = rig.floats(1.0);
        rig.add(&a, &one).expect("the stream still works");
        assert_eq!(rig.value(&a), 2.0);
    }
    println!("\n{DONE}");
}

#[test]
fn failing_or_panicking_foreign_code_dooms_its_window_and_claims_what_it_declared() {
    if in_child() {
        return check_failures();
    }
    CHILDREN.run(
        "failing_or_panicking_foreign_code_dooms_its_window_and_claims_what_it_declared",
        &stub_dir(None),
        &[],
    );
}

/// In the child: a foreign operation in an `if` body runs on the flag.
fn check_in_body() {
    let rig = Rig::new();
    let (client, stream) = (&rig.client, rig.stream);
    let seen: Seen = Arc::default();
    let fill = rig.fill_five(&seen);
    let y = rig.floats(0.0);
    let flag = client.create(stream, &1u32.to_le_bytes()).expect("flag");
    let (graph, ()) = client
        .capture(stream, |_| {
            client
                .if_flag(stream, &flag, || client.foreign(stream, &fill, &[&y]))
                .map(|_: Ran| ())
        })
        .expect("captured with the body");
    client.write_f32(&y, &[0.0; N]).expect("clear y");
    client.replay(&graph).expect("replay, flag set");
    client.sync(stream).expect("sync");
    assert_eq!(rig.value(&y), 5.0, "the body ran");
    client.write_f32(&y, &[0.0; N]).expect("clear y");
    client
        .write(&flag, &0u32.to_le_bytes())
        .expect("clear the flag");
    client.replay(&graph).expect("replay, flag clear");
    client.sync(stream).expect("sync");
    assert_eq!(rig.value(&y), 0.0, "the body was skipped");

    // Code that panics inside a body: the call is refused, the capture
    // with it, and the stream captures again after.
    quiet_deliberate_panics();
    let panics = failing_op(&rig.device, true);
    let err = client
        .capture(stream, |_| {
            client
                .if_flag(stream, &flag, || client.foreign(stream, &panics, &[&y]))
                .map(|_: Ran| ())
        })
        .expect_err("a panicking body operation is refused");
    assert!(err.to_string().contains("panicked"), "{err}");
    let (graph, ()) = client
        .capture(stream, |_| client.foreign(stream, &fill, &[&y]))
        .expect("the stream captures again");
    client.write_f32(&y, &[0.0; N]).expect("clear y");
    client.replay(&graph).expect("replay");
    client.sync(stream).expect("sync");
    assert_eq!(rig.value(&y), 5.0);
    println!("\n{DONE}");
}

#[test]
fn a_foreign_operation_in_a_conditional_body_runs_on_the_flag() {
    if in_child() {
        return check_in_body();
    }
    CHILDREN.run(
        "a_foreign_operation_in_a_conditional_body_runs_on_the_flag",
        &stub_dir(None),
        &[("CUDA_STUB_SETTER_RESULT", "0")],
    );
}

/// In the child, on a driver without the 12.3 capture functions: refused
/// in a window with the reason, run at once still.
fn check_old_driver() {
    let rig = Rig::new();
    let (client, stream) = (&rig.client, rig.stream);
    let seen: Seen = Arc::default();
    let fill = rig.fill_five(&seen);
    let y = rig.floats(0.0);
    client.foreign(stream, &fill, &[&y]).expect("at once");
    assert_eq!(rig.value(&y), 5.0);
    let window = client.prepare(stream).expect("prepare");
    client.begin(stream, window).expect("begin");
    let err = client
        .foreign(stream, &fill, &[&y])
        .expect_err("refused in a window");
    assert!(
        err.to_string().contains("cuStreamGetCaptureInfo_v3"),
        "{err}"
    );
    client.instantiate(stream, window).expect_err("doomed");
    let z = rig.floats(0.0);
    client
        .foreign(stream, &fill, &[&z])
        .expect("at once, after");
    assert_eq!(rig.value(&z), 5.0);
    println!("\n{DONE}");
}

#[test]
fn a_driver_without_the_capture_functions_refuses_foreign_work_in_a_window() {
    if in_child() {
        return check_old_driver();
    }
    CHILDREN.run(
        "a_driver_without_the_capture_functions_refuses_foreign_work_in_a_window",
        &stub_dir(Some("no-conditionals")),
        &[],
    );
}

/// `cuMemAllocAsync`, as the stub exports it.
type AllocAsyncFn = unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> i32;

/// In the child: work that allocates is refused in a window, as a foreign
/// operation at its call and as the caller's own work on an adopted stream
/// at the instantiate; each window claims what it wrote, and the stream
/// captures again after.
fn check_allocations() {
    let rig = Rig::new();
    let (client, stream) = (&rig.client, rig.stream);
    // SAFETY: the stub's prototype.
    let alloc_async = unsafe { stub_fn::<AllocAsyncFn>("cuMemAllocAsync") };
    let op = move |s: &ForeignStream<'_>| {
        let mut pointer: CUdeviceptr = 0;
        // SAFETY: a valid place for the address, on the stream handed over.
        match unsafe { alloc_async(&mut pointer, 256, s.stream) } {
            0 => Ok(()),
            code => Err(format!("cuMemAllocAsync answered {code}")),
        }
    };
    // SAFETY: deliberately breaks the contract by allocating, which the
    // backend must refuse inside a window; it touches no memory.
    let allocating = capture_core::Kernel::new(
        unsafe { Kernel::foreign(&rig.device, "allocates", &[Access::Write], op) }
            .expect("a foreign operation"),
    );
    let y = rig.floats(1.0);
    client
        .foreign(stream, &allocating, &[&y])
        .expect("at once, an allocation is the caller's business");
    let err = client
        .capture(stream, |_| client.foreign(stream, &allocating, &[&y]))
        .expect_err("refused in a window");
    assert!(
        err.to_string().contains("allocates or frees memory"),
        "{err}"
    );
    assert!(matches!(client.read(&y), Err(Error::Claimed { .. })));

    // The caller's own allocation on an adopted stream, inside a window.
    let raw = raw_stream(rig.device.raw_context());
    // SAFETY: the stub's stream lives for the process; the caller's own
    // work on it below touches no memory of the library's.
    let adopted = unsafe { backend_cuda::Stream::from_raw(&rig.device, raw, ()) }
        .expect("a stream of device 0");
    let adopted = client.adopt_stream(adopted).expect("adopted");
    let x = client.create_f32(adopted, &[1.0; N]).expect("x");
    let one = client.create_f32(adopted, &[1.0; N]).expect("one");
    let add = |to: &Buffer| {
        let info = BuiltinInfo::new(N as u32, 0.0).to_bytes();
        client.launch(adopted, &rig.add, [1, 1, 1], &[to, &one], &info, &[])
    };
    add(&x).expect("its info bytes met before the window");
    let window = client.prepare(adopted).expect("prepare");
    client.begin(adopted, window).expect("begin");
    add(&x).expect("recorded");
    let mut pointer: CUdeviceptr = 0;
    // SAFETY: a valid place for the address, on the caller's own stream.
    assert_eq!(unsafe { alloc_async(&mut pointer, 256, raw) }, 0);
    let err = client
        .instantiate(adopted, window)
        .expect_err("a graph that allocates is refused");
    assert!(err.to_string().contains("memory allocation"), "{err}");
    assert!(matches!(client.read(&x), Err(Error::Claimed { .. })));
    let (graph, ()) = client
        .capture(stream, |_| rig.add(&rig.floats(1.0), &rig.floats(2.0)))
        .expect("the library's own stream captures still");
    drop(graph);
    println!("\n{DONE}");
}

#[test]
fn work_that_allocates_inside_a_window_is_refused() {
    if in_child() {
        return check_allocations();
    }
    CHILDREN.run(
        "work_that_allocates_inside_a_window_is_refused",
        &stub_dir(None),
        &[],
    );
}

/// Set when dropped: what a foreign operation's code owns, watched.
struct Watched(Arc<AtomicBool>);

impl Drop for Watched {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// In the child: a foreign operation dropped while another stream of the
/// GPU records keeps its code (and what the code owns, such as a cuBLAS
/// handle whose destruction syncs the device) until the recording ends.
fn check_code_outlives_recordings() {
    let rig = Rig::new();
    let client = &rig.client;
    let dropped = Arc::new(AtomicBool::new(false));
    let owned = Watched(Arc::clone(&dropped));
    let op = move |_: &ForeignStream<'_>| {
        let _owned = &owned;
        Ok(())
    };
    // SAFETY: it enqueues nothing.
    let kernel = unsafe { Kernel::foreign(&rig.device, "owns", &[Access::Write], op) }
        .expect("a foreign operation");
    let recording = client.create_stream().expect("another stream");
    let window = client.prepare(recording).expect("prepare");
    client.begin(recording, window).expect("begin");
    drop(kernel);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "its code lives while a stream of the GPU records"
    );
    drop(client.instantiate(recording, window));
    assert!(
        dropped.load(Ordering::SeqCst),
        "and goes once no stream records"
    );
    println!("\n{DONE}");
}

#[test]
fn a_foreign_operations_code_is_dropped_only_once_no_stream_records() {
    if in_child() {
        return check_code_outlives_recordings();
    }
    CHILDREN.run(
        "a_foreign_operations_code_is_dropped_only_once_no_stream_records",
        &stub_dir(None),
        &[],
    );
}
