//! The recording bookkeeping against the stub whose streams, events,
//! captures and memory work on host memory: frees wait for every recording
//! on the GPU, whichever `Device` opened it, and run after it without the
//! GPU's lock, and a stream replaced after a capture left it recording is
//! ordered after all its work. And events
//! across streams, with the stub queuing each stream's work until something
//! waits for it (`CUDA_STUB_DEFER`): a wait orders another stream's work,
//! an event of another device is refused, and an event dropped right after
//! a wait, or after its streams, is destroyed in its own context. And the
//! order a graph keeps: a captured chain's edges replaced by a dependency
//! graph's before instantiation and update, left alone for the chain, a
//! capture that is no chain refused, a 12.0 to 12.2 driver rewriting edges
//! with the 10.0 edge functions, and a driver without any edge functions
//! keeping the chain. And the calls that another thread's capture in
//! global mode would refuse, made in relaxed mode, leaving the calling
//! thread's own mode as it was.
//!
//! And what is made elsewhere, brought in: memory imported, launched on,
//! captured and let go after its last use, bad imports refused; a stream
//! adopted, whose graph holds the caller's own launch and which is never
//! destroyed; a context adopted and kernels over functions made elsewhere,
//! whose owners go last; every refusal handing the keep-alive back; and,
//! with the `cudarc` feature, cudarc itself on the stub, whose slice an
//! import takes only once cudarc's readers on other streams are done.
//!
//! Each case runs in a child process (this test binary, run again with the
//! stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

use backend_cuda::{
    CUcontext, CUdeviceptr, CUfunction, CUstream, Cuda, Device, DevicePage, HostPage, Kernel,
    Stream,
};
use capture_core::{
    Access, Builtin, BuiltinInfo, Client, Config, Dependencies, DeviceSlice, Driver, DriverError,
    Error, GraphDriver, HostSlice, Order, Rejected, Signature, StreamId, Updated,
};

mod runs_stub;
use runs_stub::{
    Children, raw_alloc, raw_stream, raw_stream_with, stub_dir, stub_edges, stub_fn, stub_function,
    stub_int,
};

const DONE: &str = "RUNS_CHILD_DONE";
const CHILDREN: Children = Children {
    marker: "BACKEND_CUDA_RUNS_CHILD",
    done: DONE,
};

fn in_child() -> bool {
    CHILDREN.inside()
}

/// Run `test` again in a child with the stub first on the library path,
/// and check that it finished.
fn in_stub(test: &str) {
    in_stub_with(test, &[]);
}

/// As [`in_stub`], with `vars` set for the stub.
fn in_stub_with(test: &str, vars: &[(&str, &str)]) {
    CHILDREN.run(test, &stub_dir(None), vars);
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

/// Make the stub's captures put every node after the first instead of
/// after the one before (a graph that is no chain), or not.
fn branch_captures(on: bool) {
    // SAFETY: as in `stub_int`; cuStubBranchCaptures takes an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(i32)>(b"cuStubBranchCaptures\0")
            .expect("the stub exports it");
        function(i32::from(on));
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

/// The stream another thread begins a recording on while a free runs, and
/// what came of it.
static BEGINNER: Mutex<Option<Stream>> = Mutex::new(None);
static BEGUN: Mutex<Option<Result<Stream, String>>> = Mutex::new(None);

/// Called by the stub at the start of a `cuMemFree_v2`: begin a recording
/// on another thread, as a user's thread would, and wait a while for it. A
/// begin still waiting means the free runs under the GPU's lock.
extern "C" fn begin_on_another_thread() {
    let Some(mut stream) = BEGINNER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let begun = Cuda::begin(&mut stream).map_err(|e| e.to_string());
        let _ = tx.send(begun.map(|()| stream));
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| Err("the begin waited for the free".to_owned()));
    *BEGUN.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
}

/// Make the stub call `callback` inside every `cuMemFree_v2`, or stop.
fn on_free(callback: Option<extern "C" fn()>) {
    // SAFETY: as in `stub_int`; cuStubOnFree takes a nullable function
    // pointer, which lives as long as the program.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(Option<extern "C" fn()>)>(b"cuStubOnFree\0")
            .expect("the stub exports it");
        function(callback);
    }
}

/// In the child: frees held back by a recording run once it ends, without
/// the GPU's lock: another thread's begin goes ahead while one runs, and
/// the frees still queued then wait for that recording.
fn check_deferred_frees_outside_the_lock() {
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let mut recording = Cuda::create_stream(&device).expect("a stream");
    let mut other = Cuda::create_stream(&device).expect("a stream");
    let first = Cuda::allocate_device_page(&mut other, 64).expect("a page");
    let second = Cuda::allocate_device_page(&mut other, 64).expect("a page");
    Cuda::begin(&mut recording).expect("the stream records");
    Cuda::release_device_page(&mut other, first);
    Cuda::release_device_page(&mut other, second);
    *BEGINNER.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(Cuda::create_stream(&device).expect("a stream"));
    let before = stub_int("cuStubReleases");
    on_free(Some(begin_on_another_thread));
    let graph = Cuda::end(&mut recording).expect("the recording ends");
    on_free(None);
    let begun = BEGUN.lock().unwrap_or_else(PoisonError::into_inner).take();
    let mut began = match begun {
        Some(Ok(stream)) => stream,
        Some(Err(why)) => panic!("another thread's begin during a deferred free: {why}"),
        None => panic!("no deferred free ran"),
    };
    assert_eq!(
        stub_int("cuStubReleases"),
        before + 1,
        "the second page is freed while another recording is open"
    );
    drop(Cuda::end(&mut began).expect("the other recording ends"));
    assert_eq!(
        stub_int("cuStubReleases"),
        before + 2,
        "the second page waited for it"
    );
    drop(graph);
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    println!("\n{DONE}");
}

#[test]
fn deferred_frees_run_without_the_gpus_lock() {
    if in_child() {
        return check_deferred_frees_outside_the_lock();
    }
    in_stub("deferred_frees_run_without_the_gpus_lock");
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

/// The stub queues each stream's work until something waits for it.
const DEFER: (&str, &str) = ("CUDA_STUB_DEFER", "1");

/// A whole host page copied into a whole device page, on `stream`.
fn upload(stream: &mut Stream, host: &HostPage, page: &DevicePage, len: u64) {
    Cuda::copy_to_device(
        stream,
        HostSlice::<Cuda> {
            page: host,
            offset: 0,
            len,
        },
        DeviceSlice::<Cuda> {
            page,
            offset: 0,
            len,
        },
    )
    .expect("the upload is enqueued");
}

/// A whole device page copied into a whole host page, on `stream`.
fn download(stream: &mut Stream, page: &DevicePage, host: &HostPage, len: u64) {
    Cuda::copy_to_host(
        stream,
        DeviceSlice::<Cuda> {
            page,
            offset: 0,
            len,
        },
        HostSlice::<Cuda> {
            page: host,
            offset: 0,
            len,
        },
    )
    .expect("the download is enqueued");
}

/// Wait on the host for everything enqueued on `stream` so far.
fn finish(stream: &mut Stream) {
    let signal = Cuda::signal(stream).expect("a signal");
    Cuda::fence(stream, signal).expect("the fence passes");
}

fn read(host: &HostPage, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    Cuda::read_host(host, 0, &mut out);
    out
}

/// In the child: A uploads, records an event; B waits for it and downloads.
/// Without the wait B would read the page before A's upload has run, as the
/// first half shows.
fn check_a_wait_orders_another_streams_work() {
    const LEN: u64 = 64;
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let mut a = Cuda::create_stream(&device).expect("stream A");
    let mut b = Cuda::create_stream(&device).expect("stream B");
    let source = Cuda::allocate_host_page(&mut a, LEN).expect("A's host page");
    let target = Cuda::allocate_host_page(&mut b, LEN).expect("B's host page");
    let page = Cuda::allocate_device_page(&mut a, LEN).expect("a device page");
    Cuda::write_host(&source, 0, &[7; LEN as usize]);

    // Unordered: B's download runs before A's upload.
    upload(&mut a, &source, &page, LEN);
    download(&mut b, &page, &target, LEN);
    finish(&mut b);
    assert_eq!(
        read(&target, LEN as usize),
        [0; LEN as usize],
        "the stub ran A's work before anything waited for it"
    );
    finish(&mut a);

    // Ordered by an event.
    Cuda::write_host(&source, 0, &[9; LEN as usize]);
    upload(&mut a, &source, &page, LEN);
    let event = Cuda::record_event(&mut a).expect("A records an event");
    Cuda::wait_event(&mut b, &event).expect("B waits for it");
    download(&mut b, &page, &target, LEN);
    finish(&mut b);
    assert_eq!(
        read(&target, LEN as usize),
        [9; LEN as usize],
        "B's download after the wait did not see A's upload"
    );
    drop(event);
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    finish(&mut a);
    Cuda::release_device_page(&mut a, page);
    Cuda::release_host_page(&mut a, source);
    Cuda::release_host_page(&mut b, target);
    println!("\n{DONE}");
}

#[test]
fn a_wait_on_an_event_orders_another_streams_later_work() {
    if in_child() {
        return check_a_wait_orders_another_streams_work();
    }
    in_stub_with(
        "a_wait_on_an_event_orders_another_streams_later_work",
        &[DEFER],
    );
}

/// In the child: the event is dropped right after the wait, before the
/// work it orders has run, and before the recording stream is.
fn check_drop_after_wait() {
    const LEN: u64 = 16;
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let mut a = Cuda::create_stream(&device).expect("stream A");
    let mut b = Cuda::create_stream(&device).expect("stream B");
    let source = Cuda::allocate_host_page(&mut a, LEN).expect("A's host page");
    let target = Cuda::allocate_host_page(&mut b, LEN).expect("B's host page");
    let page = Cuda::allocate_device_page(&mut a, LEN).expect("a device page");
    Cuda::write_host(&source, 0, &[5; LEN as usize]);
    upload(&mut a, &source, &page, LEN);
    let event = Cuda::record_event(&mut a).expect("A records an event");
    Cuda::wait_event(&mut b, &event).expect("B waits for it");
    let destroyed = stub_int("cuStubEventsDestroyed");
    drop(event);
    assert_eq!(
        stub_int("cuStubEventsDestroyed"),
        destroyed + 1,
        "the event was not destroyed in its context"
    );
    download(&mut b, &page, &target, LEN);
    finish(&mut b);
    assert_eq!(read(&target, LEN as usize), [5; LEN as usize]);

    // An event outliving every stream of its device is still destroyed in
    // its own context.
    let late = Cuda::record_event(&mut a).expect("A records another event");
    finish(&mut a);
    Cuda::release_device_page(&mut a, page);
    Cuda::release_host_page(&mut a, source);
    Cuda::release_host_page(&mut b, target);
    drop(a);
    drop(b);
    drop(device);
    let destroyed = stub_int("cuStubEventsDestroyed");
    drop(late);
    assert_eq!(
        stub_int("cuStubEventsDestroyed"),
        destroyed + 1,
        "the event outliving its streams was not destroyed in its context"
    );
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    println!("\n{DONE}");
}

#[test]
fn an_event_dropped_right_after_the_wait_still_orders_and_is_destroyed() {
    if in_child() {
        return check_drop_after_wait();
    }
    in_stub_with(
        "an_event_dropped_right_after_the_wait_still_orders_and_is_destroyed",
        &[DEFER],
    );
}

/// In the child: an event recorded on device 1 is refused by a stream of
/// device 0 before the driver sees it; one of another `Device` opened on
/// the same ordinal (the same context) is taken.
fn check_other_device_refused() {
    let zero = Cuda::open_index(0).expect("the stub opens device 0");
    let one = Cuda::open_index(1).expect("the stub opens device 1");
    let zero_again = Cuda::open_index(0).expect("the stub opens device 0 again");
    let mut on_zero = Cuda::create_stream(&zero).expect("a stream of device 0");
    let mut on_one = Cuda::create_stream(&one).expect("a stream of device 1");
    let mut on_zero_again = Cuda::create_stream(&zero_again).expect("another stream of device 0");
    let foreign = Cuda::record_event(&mut on_one).expect("device 1 records an event");
    let refused = Cuda::wait_event(&mut on_zero, &foreign).expect_err("the wait is refused");
    assert_eq!(refused.backend, "cuda");
    assert_eq!(refused.op, "wait for an event");
    assert!(refused.message.contains("another device"), "{refused}");
    let same = Cuda::record_event(&mut on_zero_again).expect("device 0 records an event");
    Cuda::wait_event(&mut on_zero, &same).expect("an event of the same context is waited for");
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    println!("\n{DONE}");
}

#[test]
fn an_event_of_another_device_is_refused() {
    if in_child() {
        return check_other_device_refused();
    }
    in_stub_with(
        "an_event_of_another_device_is_refused",
        &[DEFER, ("CUDA_STUB_DEVICE_COUNT", "2")],
    );
}

/// A dependency graph over `nodes` operations with these edges.
fn deps(nodes: usize, edges: &[(usize, usize)]) -> Dependencies {
    Dependencies {
        nodes,
        edges: edges.to_vec(),
        ..Dependencies::default()
    }
}

/// What the order tests record: `ops` copies, each of one host page's
/// 16-byte part into one device page's, on one stream.
struct Bench {
    stream: Stream,
    host: HostPage,
    page: DevicePage,
}

impl Bench {
    const PART: u64 = 16;

    fn new() -> Self {
        let device = Cuda::open_index(0).expect("the stub opens device 0");
        let mut stream = Cuda::create_stream(&device).expect("a stream");
        let host = Cuda::allocate_host_page(&mut stream, 256).expect("a host page");
        let page = Cuda::allocate_device_page(&mut stream, 256).expect("a device page");
        Self { stream, host, page }
    }

    fn record(&mut self, ops: u64) -> backend_cuda::Recording {
        Cuda::begin(&mut self.stream).expect("the stream records");
        for i in 0..ops {
            Cuda::copy_to_device(
                &mut self.stream,
                HostSlice::<Cuda> {
                    page: &self.host,
                    offset: i * Self::PART,
                    len: Self::PART,
                },
                DeviceSlice::<Cuda> {
                    page: &self.page,
                    offset: i * Self::PART,
                    len: Self::PART,
                },
            )
            .expect("the copy is recorded");
        }
        Cuda::end(&mut self.stream).expect("the recording ends")
    }

    fn instantiate(
        &mut self,
        ops: u64,
        order: Order<'_>,
    ) -> Result<backend_cuda::Executable, DriverError> {
        let recording = self.record(ops);
        Cuda::instantiate(&mut self.stream, recording, order)
    }

    fn update(
        &mut self,
        exec: &mut backend_cuda::Executable,
        ops: u64,
        order: Order<'_>,
    ) -> Result<Updated<backend_cuda::Recording>, DriverError> {
        let recording = self.record(ops);
        Cuda::update(&mut self.stream, exec, recording, order)
    }

    fn release(mut self) {
        Cuda::release_device_page(&mut self.stream, self.page);
        Cuda::release_host_page(&mut self.stream, self.host);
    }
}

/// In the child: four copies recorded, instantiated as their dependency
/// graph and as the chain; the graph replays what was recorded. The edges
/// change through the 10.0 functions where `plain`, else only through the
/// 12.3 ones.
fn check_dependency_order(plain: bool) {
    let mut bench = Bench::new();
    let calls = stub_int("cuStubEdgeCalls");
    let exec = bench
        .instantiate(4, Order::Chain)
        .expect("the chain instantiates");
    assert_eq!(stub_edges(), [(0, 1), (1, 2), (2, 3)]);
    assert_eq!(
        stub_int("cuStubEdgeCalls"),
        calls,
        "the chain order asked the driver about edges"
    );
    drop(exec);

    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let exec = bench
        .instantiate(4, Order::Dependencies(&two_pairs))
        .expect("the dependency graph instantiates");
    assert_eq!(stub_edges(), [(0, 2), (1, 3)]);
    assert!(stub_int("cuStubEdgeCalls") > calls);
    assert_eq!(
        stub_int("cuStubPlainEdgeCalls") > 0,
        plain,
        "which spelling of the edge functions was called"
    );

    // The replay runs every recorded copy.
    Cuda::write_host(&bench.host, 0, &[3; 64]);
    Cuda::replay(&exec, &mut bench.stream).expect("the graph replays");
    finish(&mut bench.stream);
    let out = Cuda::allocate_host_page(&mut bench.stream, 64).expect("a host page");
    download(&mut bench.stream, &bench.page, &out, 64);
    finish(&mut bench.stream);
    assert_eq!(read(&out, 64), [3; 64]);
    Cuda::release_host_page(&mut bench.stream, out);
    drop(exec);

    // Dependencies that are the chain itself need no rewriting.
    let calls = stub_int("cuStubEdgeCalls");
    let chain = deps(3, &[(0, 1), (1, 2)]);
    let exec = bench
        .instantiate(3, Order::Dependencies(&chain))
        .expect("the chain instantiates");
    assert_eq!(stub_edges(), [(0, 1), (1, 2)]);
    assert_eq!(stub_int("cuStubEdgeCalls"), calls);
    // No edges at all: every operation may run at once.
    let none = deps(3, &[]);
    let free = bench
        .instantiate(3, Order::Dependencies(&none))
        .expect("the edgeless graph instantiates");
    assert_eq!(stub_edges(), []);
    drop((exec, free));
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    bench.release();
    println!("\n{DONE}");
}

#[test]
fn a_graph_is_instantiated_with_its_dependency_edges_or_the_chain() {
    if in_child() {
        return check_dependency_order(false);
    }
    in_stub("a_graph_is_instantiated_with_its_dependency_edges_or_the_chain");
}

#[test]
fn a_driver_before_12_3_rewrites_edges_with_the_plain_functions() {
    if in_child() {
        check_dependency_order(true);
        return check_update_order();
    }
    CHILDREN.run(
        "a_driver_before_12_3_rewrites_edges_with_the_plain_functions",
        &stub_dir(Some("no-edge-data")),
        &[],
    );
}

/// In the child: updates with the same edges go in place; with other edges
/// (or the chain) the recording comes back, and instantiates with its own.
fn check_update_order() {
    let mut bench = Bench::new();
    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let crossed = deps(4, &[(0, 3), (1, 2)]);
    let mut exec = bench
        .instantiate(4, Order::Dependencies(&two_pairs))
        .expect("the dependency graph instantiates");
    let in_place = stub_int("cuStubUpdatesInPlace");
    let instantiations = stub_int("cuStubInstantiations");

    let same = bench.record(4);
    match Cuda::update(
        &mut bench.stream,
        &mut exec,
        same,
        Order::Dependencies(&two_pairs),
    ) {
        Ok(Updated::InPlace) => {}
        other => panic!("the same edges were not updated in place: {other:?}"),
    }
    assert_eq!(stub_int("cuStubUpdatesInPlace"), in_place + 1);
    assert_eq!(stub_edges(), [(0, 2), (1, 3)]);

    let other = bench.record(4);
    let back = match Cuda::update(
        &mut bench.stream,
        &mut exec,
        other,
        Order::Dependencies(&crossed),
    ) {
        Ok(Updated::Topology(recording)) => recording,
        other => panic!("other edges were not handed back: {other:?}"),
    };
    assert_eq!(stub_int("cuStubUpdatesInPlace"), in_place + 1);
    // Instantiated as capture-core does with a recording handed back: the
    // edges already rewritten are kept.
    exec = Cuda::instantiate(&mut bench.stream, back, Order::Dependencies(&crossed))
        .expect("the recording handed back instantiates");
    assert_eq!(stub_int("cuStubInstantiations"), instantiations + 1);
    assert_eq!(stub_edges(), [(0, 3), (1, 2)]);

    // The chain differs from the dependency graph; the handed-back
    // recording gets its chain back.
    let chained = bench.record(4);
    let back = match Cuda::update(
        &mut bench.stream,
        &mut exec,
        chained,
        Order::Dependencies(&two_pairs),
    ) {
        Ok(Updated::Topology(recording)) => recording,
        other => panic!("other edges were not handed back: {other:?}"),
    };
    exec = Cuda::instantiate(&mut bench.stream, back, Order::Chain)
        .expect("the recording instantiates as a chain");
    assert_eq!(stub_edges(), [(0, 1), (1, 2), (2, 3)]);
    let chained = bench.record(4);
    match Cuda::update(&mut bench.stream, &mut exec, chained, Order::Chain) {
        Ok(Updated::InPlace) => {}
        other => panic!("a chain was not updated in place: {other:?}"),
    }
    let deps_again = bench.record(4);
    match Cuda::update(
        &mut bench.stream,
        &mut exec,
        deps_again,
        Order::Dependencies(&crossed),
    ) {
        Ok(Updated::Topology(_)) => {}
        other => panic!("a dependency graph updated a chain: {other:?}"),
    }
    drop(exec);
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    bench.release();
    println!("\n{DONE}");
}

#[test]
fn an_update_goes_in_place_only_with_the_same_edges() {
    if in_child() {
        return check_update_order();
    }
    in_stub("an_update_goes_in_place_only_with_the_same_edges");
}

/// In the child: a captured graph that is no chain cannot take dependency
/// edges, and says why; as the chain it instantiates as captured.
fn check_branched_capture_refused() {
    let mut bench = Bench::new();
    branch_captures(true);
    let edges = deps(3, &[(0, 2)]);
    let refused = bench
        .instantiate(3, Order::Dependencies(&edges))
        .expect_err("a graph that is no chain is refused");
    assert_eq!(refused.backend, "cuda");
    assert_eq!(refused.op, "instantiate");
    assert!(refused.message.contains("not one chain"), "{refused}");
    assert!(
        refused.message.contains(
            "is not one chain of its 3 node(s) (node 0 is followed by more than one), so its \
             nodes cannot be matched to the operations issued"
        ),
        "{refused}"
    );

    let mut exec = bench
        .instantiate(3, Order::Chain)
        .expect("as captured it instantiates");
    assert_eq!(stub_edges(), [(0, 1), (0, 2)]);
    let refused = bench
        .update(&mut exec, 3, Order::Dependencies(&edges))
        .expect_err("an update with it is refused");
    assert_eq!(refused.op, "update graph");
    assert!(refused.message.contains("not one chain"), "{refused}");
    branch_captures(false);
    drop(exec);
    assert_eq!(
        stub_int("cuStubContextDepth"),
        0,
        "a context was left pushed"
    );
    bench.release();
    println!("\n{DONE}");
}

#[test]
fn a_capture_that_is_no_chain_is_refused_a_dependency_order() {
    if in_child() {
        return check_branched_capture_refused();
    }
    in_stub("a_capture_that_is_no_chain_is_refused_a_dependency_order");
}

/// In the child, with a driver lacking the edge functions: the dependency
/// order falls back to the chain, and updates compare as chains.
fn check_fallback_to_chain() {
    let mut bench = Bench::new();
    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let mut exec = bench
        .instantiate(4, Order::Dependencies(&two_pairs))
        .expect("the recording instantiates as a chain");
    assert_eq!(stub_edges(), [(0, 1), (1, 2), (2, 3)]);
    let crossed = deps(4, &[(0, 3), (1, 2)]);
    match bench.update(&mut exec, 4, Order::Dependencies(&crossed)) {
        Ok(Updated::InPlace) => {}
        other => panic!("two chains were not updated in place: {other:?}"),
    }
    assert_eq!(stub_edges(), [(0, 1), (1, 2), (2, 3)]);
    drop(exec);
    bench.release();
    println!("\n{DONE}");
}

#[test]
fn a_driver_without_the_edge_functions_keeps_the_chain() {
    if in_child() {
        return check_fallback_to_chain();
    }
    CHILDREN.run(
        "a_driver_without_the_edge_functions_keeps_the_chain",
        &stub_dir(Some("no-edge-functions")),
        &[],
    );
}

/// Set the calling thread's stream-capture mode through the stub's
/// `cuThreadExchangeStreamCaptureMode`, as another library would; the mode
/// it had comes back.
fn exchange_capture_mode(mode: i32) -> i32 {
    let mut mode = mode;
    // SAFETY: as in `stub_int`; the exchange takes a pointer to an int,
    // which is live for the call.
    let code = unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(*mut i32) -> i32>(b"cuThreadExchangeStreamCaptureMode\0")
            .expect("the stub exports it");
        function(&mut mode)
    };
    assert_eq!(code, 0, "the stub refused capture mode {mode}");
    mode
}

/// Play, or stop playing, a capture in global mode on another thread.
fn foreign_global_capture(on: bool) {
    // SAFETY: as in `stub_int`; cuStubForeignGlobalCapture takes an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(i32)>(b"cuStubForeignGlobalCapture\0")
            .expect("the stub exports it");
        function(i32::from(on));
    }
}

/// In the child: while another thread captures in global mode, pages are
/// allocated and freed and a module loaded and unloaded, from a thread in
/// global mode (the driver's default) and from one in thread-local mode;
/// each call leaves the thread's mode as it found it.
fn check_calls_beside_a_foreign_global_capture() {
    const GLOBAL: i32 = 0;
    const THREAD_LOCAL: i32 = 1;
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let mut stream = Cuda::create_stream(&device).expect("a stream");
    foreign_global_capture(true);
    for mode in [GLOBAL, THREAD_LOCAL] {
        exchange_capture_mode(mode);
        let before = stub_int("cuStubReleases");
        let page = Cuda::allocate_device_page(&mut stream, 64).expect("a page beside the capture");
        assert_eq!(
            stub_int("cuStubCaptureMode"),
            mode,
            "mode left after allocating"
        );
        let host = Cuda::allocate_host_page(&mut stream, 64).expect("a host page beside it");
        let signature = Signature::new("zero").binding(Access::Write);
        // SAFETY: the stub runs no kernel; this one is never launched.
        let kernel = unsafe { Kernel::from_ptx(&device, "stub PTX", "zero", signature) }
            .expect("a module loaded beside the capture");
        assert_eq!(
            stub_int("cuStubCaptureMode"),
            mode,
            "mode left after loading"
        );
        Cuda::release_device_page(&mut stream, page);
        Cuda::release_host_page(&mut stream, host);
        drop(kernel);
        assert_eq!(
            stub_int("cuStubReleases"),
            before + 3,
            "a free or unload was refused beside the capture"
        );
        assert_eq!(
            stub_int("cuStubCaptureMode"),
            mode,
            "mode left after freeing"
        );
    }
    assert_eq!(stub_int("cuStubCaptureRefusals"), 0);
    // The stub does refuse a thread left in global mode.
    exchange_capture_mode(GLOBAL);
    let mut pointer: u64 = 0;
    // SAFETY: as in `stub_int`; cuMemAlloc_v2 takes a place for an address
    // and a size.
    let code = unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let function = library
            .get::<unsafe extern "C" fn(*mut u64, usize) -> i32>(b"cuMemAlloc_v2\0")
            .expect("the stub exports it");
        function(&mut pointer, 64)
    };
    // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert_eq!(code, 900);
    foreign_global_capture(false);
    println!("\n{DONE}");
}

#[test]
fn allocations_frees_and_module_loads_go_ahead_beside_another_librarys_global_capture() {
    if in_child() {
        return check_calls_beside_a_foreign_global_capture();
    }
    in_stub_with(
        "allocations_frees_and_module_loads_go_ahead_beside_another_librarys_global_capture",
        &[("CUDA_STUB_MODULE_RESULT", "0")],
    );
}

/// How many times the stub destroyed `stream`.
fn destroyed(stream: CUstream) -> i32 {
    // SAFETY: `int cuStubStreamDestroyed(void*)`.
    let count =
        unsafe { stub_fn::<unsafe extern "C" fn(CUstream) -> i32>("cuStubStreamDestroyed") };
    // SAFETY: a stream the stub made.
    unsafe { count(stream) }
}

/// The stub's second context of `device` (not its primary one).
fn second_context(device: i32) -> CUcontext {
    // SAFETY: `void* cuStubContext(int)`.
    let context = unsafe { stub_fn::<unsafe extern "C" fn(i32) -> CUcontext>("cuStubContext") };
    // SAFETY: a plain value.
    unsafe { context(device) }
}

/// The stub's `which` kernel as a kernel of `device`, with the builtin's
/// signature.
fn stub_kernel(device: &Arc<Device>, which: Builtin) -> capture_core::Kernel<Cuda> {
    // SAFETY: the stub's kernels take the builtins' parameters and touch
    // the first n elements of each buffer; every launch passes an n that
    // fits.
    let kernel =
        unsafe { Kernel::from_raw(device, stub_function(which.name()), which.signature(), ()) };
    capture_core::Kernel::new(kernel.expect("a kernel over the stub's function"))
}

/// Floats at a device address, which the stub keeps in host memory.
fn floats_at(pointer: CUdeviceptr, n: usize) -> Vec<f32> {
    // SAFETY: the stub's device memory is host memory of at least `n`
    // floats here, written only by this thread's calls.
    unsafe { std::slice::from_raw_parts(pointer as usize as *const f32, n) }.to_vec()
}

/// Write `bytes` at a device address, which the stub keeps in host memory.
fn write_at(pointer: CUdeviceptr, bytes: &[u8]) {
    // SAFETY: as for `floats_at`, for writing.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), pointer as usize as *mut u8, bytes.len())
    };
}

/// Set when dropped: a keep-alive whose drop can be watched.
struct Watched(Arc<AtomicBool>);

impl Drop for Watched {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A keep-alive and the flag its drop sets.
fn watched() -> (Watched, Arc<AtomicBool>) {
    let flag = Arc::new(AtomicBool::new(false));
    (Watched(Arc::clone(&flag)), flag)
}

/// The error of a refusal given a watched keep-alive, after checking that
/// the refusal handed that keep-alive back undropped.
fn handed_back<T: std::fmt::Debug>(
    refuse: impl FnOnce(Watched) -> Result<T, Rejected<Watched>>,
) -> Error {
    let (keep, dropped) = watched();
    let (error, kept) = refuse(keep).expect_err("refused").into_parts();
    assert!(
        !dropped.load(Ordering::SeqCst),
        "the refusal dropped the caller's keep-alive ({error})"
    );
    drop(kept);
    assert!(
        dropped.load(Ordering::SeqCst),
        "what was handed back is what was given"
    );
    error
}

const N: usize = 64;

fn info(scalar: f32) -> [u8; BuiltinInfo::SIZE] {
    BuiltinInfo::new(N as u32, scalar).to_bytes()
}

fn imported_bytes(client: &Client<Cuda>, stream: StreamId) -> u64 {
    client.usage(stream).expect("usage").device.imported_bytes
}

/// In the child: memory allocated elsewhere, imported, filled and added to
/// by launches, captured and replayed; its keep-alive dropped only once the
/// buffer and then the graph holding it are gone, and never freed here.
fn check_imports_run() {
    let device = Cuda::open_index(0).expect("the stub opens device 0");
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream().expect("a stream");
    let fill = stub_kernel(&device, Builtin::Fill);
    let add = stub_kernel(&device, Builtin::Add);
    let pointer = raw_alloc(device.raw_context(), N * 4);
    let (keep, dropped) = watched();
    // SAFETY: the allocation is the stub's, N floats long, kept until the
    // process ends; nothing else uses it.
    let page = unsafe { DevicePage::from_raw(&device, pointer, (N * 4) as u64, keep) }
        .expect("memory of this device and context imports");
    assert_eq!((page.device_ptr(), page.len()), (pointer, (N * 4) as u64));
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .expect("a buffer over the imported page");
    assert_eq!(imported_bytes(&client, stream), (N * 4) as u64);
    client
        .launch(stream, &fill, [1, 1, 1], &[&x], &info(2.0), &[])
        .expect("fill the imported memory");
    assert_eq!(client.read_f32(&x).expect("read"), vec![2.0; N]);
    let one = client.create_f32(stream, &[1.0; N]).expect("ones");
    let (graph, ()) = client
        .capture(stream, |_| {
            client.launch(stream, &add, [1, 1, 1], &[&x, &one], &info(0.0), &[])
        })
        .expect("a capture over imported memory");
    assert_eq!(
        client.read_f32(&x).expect("read"),
        vec![3.0; N],
        "the warmup"
    );
    drop(x);
    client.sync(stream).expect("sync");
    assert!(!dropped.load(Ordering::SeqCst), "the graph still holds it");
    for _ in 0..2 {
        graph.replay().expect("replay");
    }
    client.sync(stream).expect("sync");
    assert_eq!(floats_at(pointer, N), vec![5.0; N], "the replays wrote it");
    let releases = stub_int("cuStubReleases");
    drop(graph);
    client.sync(stream).expect("sync");
    assert!(dropped.load(Ordering::SeqCst), "let go with the graph");
    assert_eq!(imported_bytes(&client, stream), 0);
    assert!(
        stub_int("cuStubReleases") >= releases,
        "whatever else was freed"
    );
    assert_eq!(
        floats_at(pointer, N),
        vec![5.0; N],
        "the memory is the caller's still: never freed"
    );
    println!("\n{DONE}");
}

#[test]
fn imported_memory_is_launched_captured_replayed_and_let_go_after_its_last_use() {
    if in_child() {
        return check_imports_run();
    }
    in_stub("imported_memory_is_launched_captured_replayed_and_let_go_after_its_last_use");
}

/// The message of a refused import, after checking its keep-alive was
/// handed back untouched.
fn refused_import(device: &Arc<Device>, pointer: CUdeviceptr, len: u64) -> String {
    handed_back(|keep| {
        // SAFETY: every range tried here is refused before it could be used.
        unsafe { DevicePage::from_raw(device, pointer, len, keep) }
    })
    .to_string()
}

/// In the child, with two devices: each bad import is refused with its
/// reason, and a good one then goes ahead; a page imported for one device
/// is refused by a client of the other, and a page of the pools is not an
/// import.
fn check_bad_imports() {
    let device = Cuda::open_index(0).expect("device 0");
    let other = Cuda::open_index(1).expect("device 1");
    let pointer = raw_alloc(device.raw_context(), 256);
    let says = |message: String, what: &str| {
        assert!(message.contains(what), "{message:?} lacks {what:?}");
    };
    says(refused_import(&device, 0, 16), "null");
    says(refused_import(&device, pointer, 0), "empty");
    let host = [0u8; 64];
    says(
        refused_import(&device, host.as_ptr() as usize as CUdeviceptr, 64),
        "knows no device memory",
    );
    let theirs = raw_alloc(other.raw_context(), 256);
    says(
        refused_import(&device, theirs, 256),
        "belongs to device 1, not device 0",
    );
    let second = raw_alloc(second_context(0), 256);
    says(
        refused_import(&device, second, 256),
        "belongs to another context",
    );
    says(
        refused_import(&device, pointer + 128, 132),
        "run past the end of their allocation (256 bytes",
    );
    // Nothing changed: the whole allocation, and its tail, import.
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream().expect("a stream");
    // SAFETY: the stub's allocation of 256 bytes, kept for the process.
    let tail = unsafe { DevicePage::from_raw(&device, pointer + 128, 128, ()) }.expect("the tail");
    client
        .import(stream, tail)
        .map_err(|rejected| rejected.error)
        .expect("imported");
    // Imported for device 1, handed to a client of device 0.
    // SAFETY: as above, device 1's allocation.
    let foreign = unsafe { DevicePage::from_raw(&other, theirs, 256, ()) }.expect("device 1's");
    let (err, foreign) = client
        .import(stream, foreign)
        .expect_err("another device's")
        .into_parts();
    assert!(
        matches!(err, Error::OtherDevice { what: "page", .. }),
        "{err}"
    );
    let theirs_client = Client::<Cuda>::with_device(Arc::clone(&other), Config::default());
    let on_other = theirs_client.create_stream().expect("a stream of device 1");
    theirs_client
        .import(on_other, foreign)
        .map_err(|rejected| rejected.error)
        .expect("its own device takes it back");
    // A page the pools made is no import.
    let mut raw = Cuda::create_stream(&device).expect("a raw stream");
    let own = Cuda::allocate_device_page(&mut raw, 64).expect("a page");
    let (err, own) = client
        .import(stream, own)
        .expect_err("not imported")
        .into_parts();
    assert!(
        matches!(err, Error::NotImported { backend: "cuda" }),
        "{err}"
    );
    Cuda::release_device_page(&mut raw, own);
    // A device over the primary context, adopted, shares its memory.
    let adopted = Device::from_primary(0).expect("the primary context");
    assert_eq!(adopted.raw_context(), device.raw_context());
    // SAFETY: as above.
    let shared = unsafe { DevicePage::from_raw(&adopted, pointer, 64, ()) }.expect("shared");
    client
        .import(stream, shared)
        .map_err(|rejected| rejected.error)
        .expect("the same context's memory");
    println!("\n{DONE}");
}

#[test]
fn bad_imports_are_refused_and_change_nothing() {
    if in_child() {
        return check_bad_imports();
    }
    in_stub_with(
        "bad_imports_are_refused_and_change_nothing",
        &[("CUDA_STUB_DEVICE_COUNT", "2")],
    );
}

/// In the child, with two devices: a stream made elsewhere, adopted; a
/// capture on it records the caller's own launch made through the raw
/// handle between begin and instantiate, which every replay runs; the
/// stream is never destroyed, and its keep-alive goes when the library is
/// done with it. Bad handles are refused.
fn check_adopted_streams() {
    let device = Cuda::open_index(0).expect("device 0");
    let other = Cuda::open_index(1).expect("device 1");
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let raw = raw_stream(device.raw_context());
    let (keep, dropped) = watched();
    // SAFETY: the stub's stream lives for the process; the caller's own
    // launch below writes only `y`, which the library never uses.
    let adopted = unsafe { Stream::from_raw(&device, raw, keep) }.expect("a stream of device 0");
    assert_eq!(adopted.raw(), raw);
    let stream = client.adopt_stream(adopted).expect("adopted");
    let add = stub_kernel(&device, Builtin::Add);
    let x = client.create_f32(stream, &[1.0; N]).expect("x");
    let one = client.create_f32(stream, &[1.0; N]).expect("one");
    // The caller's own memory: y and the info its fill reads.
    let y = raw_alloc(device.raw_context(), N * 4);
    let y_info = raw_alloc(device.raw_context(), BuiltinInfo::SIZE);
    write_at(y_info, &info(7.0));
    // SAFETY: `cuLaunchKernel`'s prototype.
    let launch = unsafe {
        stub_fn::<
            unsafe extern "C" fn(
                CUfunction,
                u32,
                u32,
                u32,
                u32,
                u32,
                u32,
                u32,
                CUstream,
                *mut *mut c_void,
                *mut *mut c_void,
            ) -> i32,
        >("cuLaunchKernel")
    };
    let window = client.prepare(stream).expect("prepare");
    client
        .launch(stream, &add, [1, 1, 1], &[&x, &one], &info(0.0), &[])
        .expect("the warmup");
    client.begin(stream, window).expect("begin");
    client
        .launch(stream, &add, [1, 1, 1], &[&x, &one], &info(0.0), &[])
        .expect("the library's launch, recorded");
    let (mut a, mut b) = (y, y_info);
    let mut params = [
        std::ptr::from_mut(&mut a).cast::<c_void>(),
        std::ptr::from_mut(&mut b).cast::<c_void>(),
    ];
    // SAFETY: the stub's fill with its two parameters, on the adopted
    // stream, during the window: the caller's own launch.
    let code = unsafe {
        launch(
            stub_function("fill"),
            1,
            1,
            1,
            256,
            1,
            1,
            0,
            raw,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(code, 0, "the caller's launch on its stream");
    assert_eq!(floats_at(y, N), vec![0.0; N], "recorded, not run");
    let graph = client
        .instantiate(stream, window)
        .expect("a graph holding the caller's node too");
    graph.replay().expect("replay");
    client.sync(stream).expect("sync");
    assert_eq!(client.read_f32(&x).expect("read"), vec![3.0; N]);
    assert_eq!(
        floats_at(y, N),
        vec![7.0; N],
        "the caller's launch replayed"
    );
    write_at(y, &[0; N * 4]);
    graph.replay().expect("replay again");
    client.sync(stream).expect("sync");
    assert_eq!(floats_at(y, N), vec![7.0; N], "and on every replay");
    drop((graph, x, one));
    client
        .destroy_stream(stream)
        .expect("destroy the adopted stream");
    assert_eq!(destroyed(raw), 0, "the caller's stream is the caller's");
    assert!(dropped.load(Ordering::SeqCst), "its keep-alive went");

    // Bad handles.
    let refused = |raw: CUstream| {
        handed_back(|keep| {
            // SAFETY: refused before any use.
            unsafe { Stream::from_raw(&device, raw, keep) }
        })
        .to_string()
    };
    assert!(refused(std::ptr::null_mut()).contains("null"));
    assert!(refused(std::ptr::without_provenance_mut(1)).contains("default streams"));
    let blocking = raw_stream_with(device.raw_context(), 0);
    let said = refused(blocking);
    assert!(said.contains("CU_STREAM_NON_BLOCKING"), "{said}");
    assert_eq!(destroyed(blocking), 0, "the caller's stream is left alone");
    let theirs = raw_stream(other.raw_context());
    assert!(refused(theirs).contains("another context"));
    // A stream of device 1, adopted by a client of device 0.
    // SAFETY: the stub's stream of device 1, live for the process.
    let foreign = unsafe { Stream::from_raw(&other, theirs, ()) }.expect("device 1's");
    let err = client.adopt_stream(foreign).expect_err("another device's");
    assert!(matches!(err, Error::OtherDevice { .. }), "{err}");
    assert_eq!(destroyed(theirs), 0);
    println!("\n{DONE}");
}

#[test]
fn an_adopted_streams_graph_holds_the_callers_own_launch_and_the_stream_outlives_it() {
    if in_child() {
        return check_adopted_streams();
    }
    in_stub_with(
        "an_adopted_streams_graph_holds_the_callers_own_launch_and_the_stream_outlives_it",
        &[("CUDA_STUB_DEVICE_COUNT", "2")],
    );
}

/// In the child: a device over a context made elsewhere runs work and
/// drops its owner only after its last page; kernels over functions made
/// elsewhere are checked like the others and never unload a module.
fn check_adopted_contexts_and_kernels() {
    let context = second_context(0);
    let null = handed_back(|keep| {
        // SAFETY: refused before any use.
        unsafe { Device::from_raw_context(std::ptr::null_mut(), keep) }
    });
    assert!(null.to_string().contains("null"), "{null}");
    let (keep, dropped) = watched();
    // SAFETY: the stub's contexts live for the process.
    let device = unsafe { Device::from_raw_context(context, keep) }.expect("an adopted context");
    assert_eq!((device.raw_context(), device.ordinal()), (context, 0));
    let primary = Cuda::open_index(0).expect("device 0");
    assert_ne!(primary.raw_context(), context);
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client
        .create_stream()
        .expect("a stream in the adopted context");
    let fill = stub_kernel(&device, Builtin::Fill);
    let x = client.create_f32(stream, &[0.0; N]).expect("x");
    client
        .launch(stream, &fill, [1, 1, 1], &[&x], &info(4.0), &[])
        .expect("fill");
    assert_eq!(client.read_f32(&x).expect("read"), vec![4.0; N]);
    // Memory of this context, imported into a device of the primary one.
    let pointer = raw_alloc(context, 64);
    let refused = refused_import(&primary, pointer, 64);
    assert!(refused.contains("another context"), "{refused}");
    drop((x, fill, client));
    let mut raw = Cuda::create_stream(&device).expect("a driver stream");
    let page = Cuda::allocate_device_page(&mut raw, 64).expect("a page");
    drop(raw);
    drop(device);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "a page still holds the device"
    );
    drop(page);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the owner goes with the last page"
    );

    // Kernels over functions made elsewhere.
    let releases = stub_int("cuStubReleases");
    let (keep, dropped) = watched();
    // SAFETY: the stub's fill takes the builtin's parameters.
    let kernel = unsafe {
        Kernel::from_raw(
            &primary,
            stub_function("fill"),
            Builtin::Fill.signature(),
            keep,
        )
    }
    .expect("a kernel");
    drop(kernel);
    assert!(dropped.load(Ordering::SeqCst), "its keep-alive went");
    assert_eq!(stub_int("cuStubReleases"), releases, "no module unloaded");
    // Each refusal hands the keep-alive back: a null function, one that
    // runs fewer threads than its signature declares, and a signature
    // larger than the device's blocks.
    let refused = |function: CUfunction, signature: Signature| {
        handed_back(|keep| {
            // SAFETY: refused before any use.
            unsafe { Kernel::from_raw(&primary, function, signature, keep) }
        })
    };
    let null = refused(std::ptr::null_mut(), Builtin::Fill.signature());
    assert!(
        matches!(null, Error::Compile { ref log, .. } if log.contains("null")),
        "{null}"
    );
    let narrow = refused(stub_function("narrow"), Builtin::Fill.signature());
    assert!(
        matches!(narrow, Error::Compile { ref log, .. } if log.contains("at most 32 threads")),
        "{narrow}"
    );
    let too_big = Signature::new("fill")
        .binding(Access::Write)
        .info(16)
        .workgroup([2048, 1, 1]);
    let too_big = refused(stub_function("fill"), too_big);
    assert!(matches!(too_big, Error::Compile { .. }), "{too_big}");
    println!("\n{DONE}");
}

#[test]
fn adopted_contexts_and_kernels_are_never_destroyed_and_their_owners_go_last() {
    if in_child() {
        return check_adopted_contexts_and_kernels();
    }
    in_stub("adopted_contexts_and_kernels_are_never_destroyed_and_their_owners_go_last");
}

/// In the child: the address `cudarc::buffer_ptr` gives is the imported
/// memory's, a view's is its first byte's, and a pool buffer's holds what
/// the library wrote there.
#[cfg(feature = "cudarc")]
fn check_buffer_addresses() {
    use capture_core::SLICE_ALIGN;
    let device = Cuda::open_index(0).expect("device 0");
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream().expect("a stream");
    let pointer = raw_alloc(device.raw_context(), 512);
    // SAFETY: the stub's allocation of 512 bytes, kept for the process.
    let page = unsafe { DevicePage::from_raw(&device, pointer, 512, ()) }.expect("imported");
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .expect("a buffer");
    let view = x.range(SLICE_ALIGN, 64).expect("a view");
    let address = |buffer| backend_cuda::cudarc::buffer_ptr(&client, buffer).expect("an address");
    assert_eq!(address(&x), pointer);
    assert_eq!(address(&view), pointer + SLICE_ALIGN);
    let y = client.create_f32(stream, &[3.0; N]).expect("a pool buffer");
    client.sync(stream).expect("sync");
    assert_eq!(floats_at(address(&y), N), vec![3.0; N]);
    println!("\n{DONE}");
}

#[cfg(feature = "cudarc")]
#[test]
fn cudarc_reads_a_buffer_at_the_address_the_library_gives() {
    if in_child() {
        return check_buffer_addresses();
    }
    in_stub("cudarc_reads_a_buffer_at_the_address_the_library_gives");
}

/// In the child, with work queued until something waits for it: cudarc
/// reads a slice on another stream than the slice's, the slice is then
/// imported and the library writes it; the import made the slice's stream
/// wait for cudarc's read, so the read saw the values from before the
/// library's write.
#[cfg(feature = "cudarc")]
fn check_cudarc_import_waits_for_readers() {
    let context = cudarc::driver::CudaContext::new(0).expect("cudarc runs on the stub");
    let home = context.new_stream().expect("the slice's stream");
    let reader = context.new_stream().expect("another stream");
    let (ones, zeros) = ([1.0f32; N], [0.0f32; N]);
    let slice = home.clone_htod(&ones).expect("a slice");
    let mut copy = reader.clone_htod(&zeros).expect("a second slice");
    reader
        .memcpy_dtod(&slice, &mut copy)
        .expect("cudarc reads the slice on another stream");
    let device = backend_cuda::cudarc::device(&context)
        .map_err(|rejected| rejected.error)
        .expect("a device over cudarc's context");
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream().expect("a stream");
    let page = backend_cuda::cudarc::import(&device, slice)
        .map_err(|rejected| rejected.error)
        .expect("the slice imports");
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .expect("a buffer over it");
    client
        .write_f32(&x, &[9.0; N])
        .expect("the library writes it");
    client.sync(stream).expect("sync");
    assert_eq!(client.read_f32(&x).expect("read"), vec![9.0; N]);
    reader.synchronize().expect("cudarc's stream drains");
    let address = cudarc::driver::DevicePtr::device_ptr(&copy, &reader).0;
    assert_eq!(
        floats_at(address, N),
        vec![1.0; N],
        "cudarc's read ran before the library's write"
    );
    // Refusals hand back what the helpers were given: the slice, and the
    // stream's `Arc` (whose count shows the clone is not dropped).
    // SAFETY: nothing reads the empty slice.
    let empty = unsafe { home.alloc::<f32>(0) }.expect("an empty slice");
    let rejected = backend_cuda::cudarc::import(&device, empty).expect_err("an empty slice");
    assert!(rejected.error.to_string().contains("import"), "{rejected}");
    assert_eq!(rejected.handed_back.len(), 0, "the slice came back");
    drop(rejected);
    let legacy = context.default_stream();
    // SAFETY: refused before any use.
    let rejected =
        unsafe { backend_cuda::cudarc::stream(&device, &legacy) }.expect_err("the default stream");
    assert!(Arc::ptr_eq(&rejected.handed_back, &legacy));
    assert_eq!(Arc::strong_count(&legacy), 2, "its clone came back");
    drop(rejected);
    assert_eq!(Arc::strong_count(&legacy), 1);
    drop((x, client, copy, reader, home));
    println!("\n{DONE}");
}

#[cfg(feature = "cudarc")]
#[test]
fn a_cudarc_import_waits_for_cudarcs_readers_before_the_library_writes() {
    if in_child() {
        return check_cudarc_import_waits_for_readers();
    }
    in_stub_with(
        "a_cudarc_import_waits_for_cudarcs_readers_before_the_library_writes",
        &[("CUDA_STUB_DEFER", "1")],
    );
}
