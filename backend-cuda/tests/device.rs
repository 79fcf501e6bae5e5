//! The backend's own promises on a real GPU, through the driver contract
//! directly (the conformance suite covers them through capture-core): the
//! caller's context is left as it was, signals are cheap and polled, a
//! recording instantiates, replays and updates in place (or is handed back
//! when its shape differs), as the captured chain or as its dependency
//! graph, and pages freed by one stream while another records wait instead
//! of invalidating the capture.
//!
//! Without a usable device every test says why and passes, unless
//! `CONFORMANCE_REQUIRE` names `cuda`, which makes that a failure.
#![cfg(target_os = "linux")]

use std::sync::Arc;

use backend_cuda::{Cuda, Device, DevicePage, HostPage, Kernel, Stream};
use capture_core::{
    Access, Binding, Builtin, BuiltinInfo, Builtins, Dependencies, DeviceSlice, Driver,
    GraphDriver, HostSlice, Launch, Order, Updated, groups_for,
};

/// The device, or `None` after saying why there is none.
fn device() -> Option<Arc<Device>> {
    match Cuda::open() {
        Ok(device) => Some(device),
        Err(e) => {
            let required = std::env::var("CONFORMANCE_REQUIRE")
                .is_ok_and(|list| list.split(',').any(|b| b.trim() == "cuda"));
            assert!(!required, "CONFORMANCE_REQUIRE names cuda: {}", e.message);
            println!("skipped: {}", e.message);
            None
        }
    }
}

const N: u32 = 1000;
const BYTES: u64 = N as u64 * 4;

/// A stream with a device buffer of [`N`] floats, a device page of info
/// slots, and a host page holding both the info slots' sources and the
/// buffer's read-back.
struct Rig {
    stream: Stream,
    fill: Kernel,
    out: DevicePage,
    info: DevicePage,
    host: HostPage,
}

/// Where in the host page the read-back lands; info slots come first.
const READ_BACK: u64 = 256;

impl Rig {
    fn new(device: &Arc<Device>) -> Self {
        let mut stream = Cuda::create_stream(device).expect("a stream");
        let fill = Cuda::builtin(device, Builtin::Fill).expect("the fill builtin");
        let out = Cuda::allocate_device_page(&mut stream, BYTES).expect("a device page");
        let info = Cuda::allocate_device_page(&mut stream, 256).expect("an info page");
        let host = Cuda::allocate_host_page(&mut stream, READ_BACK + BYTES).expect("a host page");
        Self {
            stream,
            fill,
            out,
            info,
            host,
        }
    }

    /// Write `value`'s fill info into host slot `slot`.
    fn stage(&self, slot: u64, value: f32) {
        Cuda::write_host(
            &self.host,
            slot * 16,
            &BuiltinInfo::new(N, value).to_bytes(),
        );
    }

    /// Enqueue: info slot `slot` to the device, a fill from it, and the
    /// buffer back to the host.
    fn enqueue_fill(&mut self, slot: u64) {
        let info = DeviceSlice::<Cuda> {
            page: &self.info,
            offset: slot * 16,
            len: 16,
        };
        let staged = HostSlice::<Cuda> {
            page: &self.host,
            offset: slot * 16,
            len: 16,
        };
        Cuda::copy_to_device(&mut self.stream, staged, info).expect("the info copy");
        let bindings = [Binding {
            slice: DeviceSlice::<Cuda> {
                page: &self.out,
                offset: 0,
                len: BYTES,
            },
            access: Access::Write,
        }];
        let launch = Launch::<Cuda> {
            kernel: &self.fill,
            groups: groups_for(N),
            bindings: &bindings,
            info: Some(info),
            params: &[],
        };
        Cuda::launch(&mut self.stream, launch).expect("the fill launch");
        let back = HostSlice::<Cuda> {
            page: &self.host,
            offset: READ_BACK,
            len: BYTES,
        };
        let from = DeviceSlice::<Cuda> {
            page: &self.out,
            offset: 0,
            len: BYTES,
        };
        Cuda::copy_to_host(&mut self.stream, from, back).expect("the read-back copy");
    }

    /// Wait for everything enqueued, then read the buffer back.
    fn finish(&mut self) -> Vec<f32> {
        let signal = Cuda::signal(&mut self.stream).expect("a signal");
        Cuda::fence(&mut self.stream, signal).expect("the fence");
        let mut bytes = vec![0u8; BYTES as usize];
        Cuda::read_host(&self.host, READ_BACK, &mut bytes);
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

fn all(values: &[f32], expected: f32) -> bool {
    values.iter().all(|&v| v == expected)
}

#[test]
fn devices_are_listed_in_index_order_with_their_memory() {
    let Some(device) = device() else { return };
    let devices = Cuda::devices().expect("the list");
    assert!(!devices.is_empty());
    for (index, info) in devices.iter().enumerate() {
        println!("{info:?}");
        assert_eq!(info.index, index);
        assert!(info.memory_bytes > 0, "{info:?}");
        assert_eq!(info.kind, "GPU");
    }
    let opened = Cuda::device_info(&device);
    assert_eq!(opened, devices[opened.index]);
    let first = Cuda::open_index(0).expect("device 0 opens");
    assert_eq!(Cuda::device_info(&first), devices[0]);
}

/// `cuCtxGetCurrent` on the calling thread, through the driver the backend
/// loaded (the same name resolves to the same library).
fn current_context() -> usize {
    // SAFETY: cuCtxGetCurrent writes one pointer through its argument and
    // returns an int; the library is the driver the backend already loaded.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the driver is loaded");
        let get = library
            .get::<unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> i32>(b"cuCtxGetCurrent\0")
            .expect("cuCtxGetCurrent");
        let mut context = std::ptr::null_mut();
        assert_eq!(get(&mut context), 0);
        context as usize
    }
}

#[test]
fn a_callers_context_is_left_as_it_was() {
    let Some(device) = device() else { return };
    // A fresh thread has no current context; every call pushes the
    // device's and pops it again.
    std::thread::spawn(move || {
        assert_eq!(current_context(), 0);
        let mut rig = Rig::new(&device);
        assert_eq!(current_context(), 0, "allocating left a context current");
        rig.stage(0, 2.5);
        rig.enqueue_fill(0);
        assert_eq!(current_context(), 0, "enqueueing left a context current");
        assert!(all(&rig.finish(), 2.5));
        assert_eq!(current_context(), 0, "a fence left a context current");
        drop(rig);
        assert_eq!(current_context(), 0, "dropping left a context current");
    })
    .join()
    .expect("the thread finishes");
}

#[test]
fn signals_are_polled_and_reused_while_nothing_is_enqueued() {
    let Some(device) = device() else { return };
    let mut rig = Rig::new(&device);
    rig.stage(0, 7.0);
    rig.enqueue_fill(0);
    let signal = Cuda::signal(&mut rig.stream).expect("a signal");
    let again = Cuda::signal(&mut rig.stream).expect("a signal");
    assert_eq!(signal, again, "no work since, so the same point");
    Cuda::fence(&mut rig.stream, signal).expect("the fence");
    assert!(Cuda::is_done(&mut rig.stream, signal).expect("a poll"));
    rig.enqueue_fill(0);
    let later = Cuda::signal(&mut rig.stream).expect("a signal");
    assert_ne!(later, signal);
    // Polled until done, never blocking.
    while !Cuda::is_done(&mut rig.stream, later).expect("a poll") {
        std::thread::yield_now();
    }
    assert!(all(&rig.finish(), 7.0));
}

#[test]
fn a_recording_instantiates_replays_and_updates() {
    let Some(device) = device() else { return };
    let mut rig = Rig::new(&device);
    rig.stage(0, 1.0);
    rig.stage(1, 4.0);

    Cuda::begin(&mut rig.stream).expect("begin");
    rig.enqueue_fill(0);
    let recording = Cuda::end(&mut rig.stream).expect("end");
    let mut exec =
        Cuda::instantiate(&mut rig.stream, recording, Order::Chain).expect("instantiate");
    Cuda::upload(&exec, &mut rig.stream).expect("upload");
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 1.0));

    // The same shape from another info slot: updated in place, and the
    // next replay runs the new work.
    Cuda::begin(&mut rig.stream).expect("begin");
    rig.enqueue_fill(1);
    let recording = Cuda::end(&mut rig.stream).expect("end");
    match Cuda::update(&mut rig.stream, &mut exec, recording, Order::Chain).expect("update") {
        Updated::InPlace => {}
        Updated::Topology(_) => panic!("the same shape was not updated in place"),
    }
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 4.0));

    // Twice the work: another shape, handed back to be instantiated.
    Cuda::begin(&mut rig.stream).expect("begin");
    rig.enqueue_fill(0);
    rig.enqueue_fill(1);
    let recording = Cuda::end(&mut rig.stream).expect("end");
    let Updated::Topology(recording) =
        Cuda::update(&mut rig.stream, &mut exec, recording, Order::Chain).expect("update")
    else {
        panic!("another shape was updated in place");
    };
    // The refused update left the old graph replayable.
    rig.stage(1, 5.0);
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 5.0));
    let bigger = Cuda::instantiate(&mut rig.stream, recording, Order::Chain).expect("instantiate");
    rig.stage(1, 6.0);
    Cuda::replay(&bigger, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 6.0));
}

#[test]
fn a_recording_replays_as_its_dependency_graph() {
    let Some(device) = device() else { return };
    let mut rig = Rig::new(&device);
    rig.stage(0, 2.0);
    rig.stage(1, 3.0);
    // Each fill is three operations: its info copy, the launch, the
    // read-back. The second info copy depends on nothing; the second fill
    // waits for its info and for the first read-back of the buffer it
    // overwrites.
    let deps = Dependencies {
        nodes: 6,
        edges: vec![(0, 1), (1, 2), (2, 4), (3, 4), (4, 5)],
        ..Dependencies::default()
    };
    let record = |rig: &mut Rig| {
        Cuda::begin(&mut rig.stream).expect("begin");
        rig.enqueue_fill(0);
        rig.enqueue_fill(1);
        Cuda::end(&mut rig.stream).expect("end")
    };
    let recording = record(&mut rig);
    let mut exec = Cuda::instantiate(&mut rig.stream, recording, Order::Dependencies(&deps))
        .expect("the dependency graph instantiates");
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 3.0));

    // The same edges: in place.
    rig.stage(1, 8.0);
    let recording = record(&mut rig);
    match Cuda::update(
        &mut rig.stream,
        &mut exec,
        recording,
        Order::Dependencies(&deps),
    )
    .expect("update")
    {
        Updated::InPlace => {}
        Updated::Topology(_) => panic!("the same edges were not updated in place"),
    }
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 8.0));

    // The chain is other edges: handed back, and it instantiates as one.
    let recording = record(&mut rig);
    let Updated::Topology(recording) =
        Cuda::update(&mut rig.stream, &mut exec, recording, Order::Chain).expect("update")
    else {
        panic!("the chain updated a dependency graph in place");
    };
    let chain = Cuda::instantiate(&mut rig.stream, recording, Order::Chain).expect("instantiate");
    rig.stage(1, 9.0);
    Cuda::replay(&chain, &mut rig.stream).expect("replay");
    assert!(all(&rig.finish(), 9.0));
}

#[test]
fn an_empty_recording_instantiates_and_replays_nothing() {
    let Some(device) = device() else { return };
    let mut rig = Rig::new(&device);
    Cuda::begin(&mut rig.stream).expect("begin");
    let recording = Cuda::end(&mut rig.stream).expect("end");
    let exec = Cuda::instantiate(&mut rig.stream, recording, Order::Chain).expect("instantiate");
    Cuda::replay(&exec, &mut rig.stream).expect("replay");
    rig.finish();
}

#[test]
fn pages_freed_while_another_stream_records_wait_for_its_end() {
    let Some(device) = device() else { return };
    let mut recording_rig = Rig::new(&device);
    let mut other = Cuda::create_stream(&device).expect("another stream");
    recording_rig.stage(0, 3.0);
    Cuda::begin(&mut recording_rig.stream).expect("begin");
    recording_rig.enqueue_fill(0);
    // Another stream of the device frees pages while the capture is open.
    for _ in 0..4 {
        let page = Cuda::allocate_device_page(&mut other, 1 << 20).expect("a device page");
        Cuda::release_device_page(&mut other, page);
        let page = Cuda::allocate_host_page(&mut other, 1 << 16).expect("a host page");
        Cuda::release_host_page(&mut other, page);
    }
    let kernel = Cuda::builtin(&device, Builtin::Copy).expect("a builtin");
    drop(kernel);
    let recording = Cuda::end(&mut recording_rig.stream).expect("the capture survived");
    let exec =
        Cuda::instantiate(&mut recording_rig.stream, recording, Order::Chain).expect("instantiate");
    Cuda::replay(&exec, &mut recording_rig.stream).expect("replay");
    assert!(all(&recording_rig.finish(), 3.0));
    let signal = Cuda::signal(&mut other).expect("a signal");
    Cuda::fence(&mut other, signal).expect("the other stream is fine");
}

#[test]
fn builtins_build_again_from_the_compiled_target() {
    let Some(device) = device() else { return };
    for _ in 0..2 {
        for which in Builtin::ALL {
            let kernel = Cuda::builtin(&device, which).expect("a builtin");
            assert_eq!(Cuda::signature(&kernel).name(), which.name());
        }
    }
    let mut rig = Rig::new(&device);
    rig.stage(0, 9.0);
    rig.enqueue_fill(0);
    assert!(all(&rig.finish(), 9.0));
}
