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

/// A one-thread kernel over a `u32` counter and a `u32` flag: the counter
/// counted down (not below 0), the flag set to whether it is above 0.
const COUNTDOWN_PTX: &str = "
.version 7.0
.target sm_50
.address_size 64

.visible .entry countdown(
	.param .u64 countdown_counter,
	.param .u64 countdown_flag
)
.reqntid 1, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [countdown_counter];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.param.u64 	%rd3, [countdown_flag];
	cvta.to.global.u64 	%rd4, %rd3;
	ld.global.u32 	%r1, [%rd2];
	setp.eq.u32 	%p1, %r1, 0;
	@%p1 bra 	COUNTED;
	sub.u32 	%r1, %r1, 1;
	st.global.u32 	[%rd2], %r1;
COUNTED:
	setp.ne.u32 	%p1, %r1, 0;
	selp.u32 	%r2, 1, 0, %p1;
	st.global.u32 	[%rd4], %r2;
	ret;
}
";

/// Conditional nodes on a real driver: the setter module links
/// `cudaGraphSetConditional`, an if/else and an if replay as their flag
/// says, a loop runs 0, 1, k and `bound` iterations with its flag still
/// set after the bound, and a loop nested in an if, with an if in its
/// body, replays as it runs eagerly. On a driver before 12.4 the recording
/// is refused with the reason, and only that is checked.
#[test]
fn conditionals_replay_as_their_flags_say() {
    use capture_core::{Buffer, Client, Config, Error, Kernel as CoreKernel, Pass, Signature};

    const BOUND: u32 = 4;
    let Some(device) = device() else { return };
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream().expect("a stream");
    // SAFETY: `countdown` reads and writes only the first u32 of each of
    // its two buffers, which every launch binds (four bytes or more).
    let countdown = unsafe {
        Kernel::from_ptx(
            &device,
            COUNTDOWN_PTX,
            "countdown",
            Signature::new("countdown")
                .bindings(&[Access::ReadWrite, Access::ReadWrite])
                .workgroup([1, 1, 1]),
        )
    }
    .expect("the countdown kernel builds");
    let countdown = CoreKernel::new(countdown);
    let u32_buffer = |value: u32| client.create(stream, &value.to_le_bytes()).expect("a u32");
    let x = client.create_f32(stream, &[0.0; N as usize]).expect("x");
    let y = client.create_f32(stream, &[0.0; N as usize]).expect("y");
    let ones = client.create_f32(stream, &[1.0; N as usize]).expect("ones");
    let twos = client.create_f32(stream, &[2.0; N as usize]).expect("twos");
    let (flag, outer, counter) = (u32_buffer(0), u32_buffer(1), u32_buffer(0));
    let set = |buffer: &Buffer, value: u32| {
        client
            .write(buffer, &value.to_le_bytes())
            .expect("write a u32")
    };
    let get = |buffer: &Buffer| {
        let bytes = client.read(buffer).expect("read a u32");
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    };
    let value = |buffer: &Buffer| {
        let values = client.read_f32(buffer).expect("read floats");
        assert!(all(&values, values[0]), "uneven: {:?}", &values[..8]);
        values[0]
    };
    let zero = || {
        client.write_f32(&x, &[0.0; N as usize]).expect("zero x");
        client.write_f32(&y, &[0.0; N as usize]).expect("zero y");
    };
    let add =
        |to: &Buffer, what: &Buffer| client.run_builtin(stream, Builtin::Add, &[to, what], N, 0.0);
    let count = || client.launch(stream, &countdown, [1, 1, 1], &[&counter, &flag], &[], &[]);
    let arm = |k: u32| {
        set(&counter, k);
        set(&flag, u32::from(k > 0));
        zero();
    };
    let replay = |graph: &capture_core::GraphHandle<Cuda>| {
        graph.replay().expect("the graph replays");
        client.sync(stream).expect("sync");
    };

    // An if/else and an if. The warmup runs with the flag set, then clear.
    set(&flag, 1);
    let branches = || {
        client.if_else_flag(stream, &flag, || add(&x, &ones), || add(&x, &twos))?;
        client.if_flag(stream, &flag, || add(&x, &twos)).map(drop)
    };
    let graph = match client.capture(stream, |_pass: Pass| branches()) {
        Ok((graph, ())) => graph,
        Err(err) => match err.root() {
            Error::NoConditionals { reason, .. } => {
                println!("skipped: {reason}");
                assert!(
                    !reason.contains("setter"),
                    "the driver has conditional nodes and refused the setters: {reason}"
                );
                return;
            }
            _ => panic!("capturing conditionals: {err}"),
        },
    };
    for (set_to, expected) in [(1, 3.0), (0, 2.0)] {
        zero();
        set(&flag, set_to);
        replay(&graph);
        assert_eq!(value(&x), expected, "flag {set_to}");
    }

    // A bounded loop.
    arm(2);
    let (looped, ()) = client
        .capture(stream, |_pass: Pass| {
            client
                .while_flag(stream, &flag, BOUND, || {
                    add(&x, &ones)?;
                    count()
                })
                .map(drop)
        })
        .expect("the loop is recorded");
    for k in [0, 1, 3, BOUND, BOUND + 3] {
        arm(k);
        replay(&looped);
        let iterations = k.min(BOUND);
        assert_eq!(value(&x), iterations as f32, "k = {k}");
        assert_eq!(get(&counter), k - iterations, "k = {k}");
        assert_eq!(get(&flag), u32::from(k > BOUND), "k = {k}");
    }

    // A loop in an if, with an if in the loop's body.
    arm(2);
    set(&outer, 1);
    let (nested, ()) = client
        .capture(stream, |_pass: Pass| {
            client
                .if_flag(stream, &outer, || {
                    client
                        .while_flag(stream, &flag, BOUND, || {
                            add(&x, &ones)?;
                            client.if_flag(stream, &outer, || add(&y, &twos))?;
                            count()
                        })
                        .map(drop)
                })
                .map(drop)
        })
        .expect("the nested conditionals are recorded");
    for (outer_set, k, xs, ys) in [(0, 3, 0.0, 0.0), (1, 3, 3.0, 6.0)] {
        arm(k);
        set(&outer, outer_set);
        replay(&nested);
        assert_eq!((value(&x), value(&y)), (xs, ys), "outer {outer_set}, k {k}");
    }
}
