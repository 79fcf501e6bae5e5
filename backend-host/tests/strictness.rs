//! The host driver's own capture rules, checked on the raw driver: they
//! hold even for a caller that bypasses capture-core's bookkeeping.

use backend_host::{Host, Recording, Stream};
use capture_core::{
    Access, Binding, Builtin, BuiltinInfo, Builtins, Conditional, DeviceSlice, Driver, GraphDriver,
    HostSlice, Launch, Order, StreamId,
};

fn stream() -> (std::sync::Arc<backend_host::Device>, Stream) {
    let device = Host::open().expect("the host device always opens");
    let stream = Host::create_stream(&device).expect("a host stream");
    (device, stream)
}

fn fill(stream: &mut Stream, out: &backend_host::DevicePage, info: &backend_host::DevicePage) {
    let kernel = Host::builtin(&Host::open().expect("opens"), Builtin::Fill).expect("kernel");
    let bindings = [Binding {
        slice: DeviceSlice::<Host> {
            page: out,
            offset: 0,
            len: 16,
        },
        access: Access::Write,
    }];
    Host::launch(
        stream,
        Launch {
            kernel: &kernel,
            groups: [1, 1, 1],
            bindings: &bindings,
            info: Some(DeviceSlice {
                page: info,
                offset: 0,
                len: 16,
            }),
            params: &[],
        },
    )
    .expect("launch enqueued");
}

fn upload_info(stream: &mut Stream, info: &backend_host::DevicePage, value: f32) {
    let staging = Host::allocate_host_page(stream, 16).expect("host page");
    Host::write_host(&staging, 0, &BuiltinInfo::new(4, value).to_bytes());
    Host::copy_to_device(
        stream,
        HostSlice {
            page: &staging,
            offset: 0,
            len: 16,
        },
        DeviceSlice {
            page: info,
            offset: 0,
            len: 16,
        },
    )
    .expect("copy enqueued");
    let signal = Host::signal(stream).expect("signal");
    Host::fence(stream, signal).expect("fence");
    Host::release_host_page(stream, staging);
}

#[test]
fn a_fence_while_recording_fails_and_invalidates_the_recording() {
    let (_device, mut stream) = stream();
    Host::begin(&mut stream).expect("begin");
    assert!(
        Host::signal(&mut stream).is_err(),
        "a signal is a host sync here"
    );
    let recording = Host::end(&mut stream).expect("ended");
    assert!(!stream.is_recording(), "end left recording mode");
    let err = Host::instantiate(&mut stream, recording, Order::Chain).expect_err("invalidated");
    assert!(err.to_string().contains("invalidated"), "{err}");
    Host::signal(&mut stream).expect("eager again");
}

#[test]
fn a_page_allocated_while_recording_makes_instantiate_refuse() {
    let (_device, mut stream) = stream();
    Host::begin(&mut stream).expect("begin");
    let page = Host::allocate_device_page(&mut stream, 256).expect("the page itself is given");
    let recording = Host::end(&mut stream).expect("ended");
    let err = Host::instantiate(&mut stream, recording, Order::Chain).expect_err("refused");
    assert!(
        err.to_string().contains("allocated while recording"),
        "{err}"
    );
    Host::release_device_page(&mut stream, page);
}

#[test]
fn calls_out_of_order_trip_the_wire() {
    let (_device, mut stream) = stream();
    assert!(Host::end(&mut stream).is_err(), "end without begin");
    Host::begin(&mut stream).expect("begin");
    assert!(Host::begin(&mut stream).is_err(), "begin twice");
    let signal = 0;
    assert!(
        Host::is_done(&mut stream, signal).is_err(),
        "a query while recording"
    );
    let recording = Host::end(&mut stream).expect("ended");
    let mut graph =
        Host::instantiate(&mut stream, Recording::default(), Order::Chain).expect("an empty graph");
    Host::begin(&mut stream).expect("begin again");
    assert!(
        Host::update(&mut stream, &mut graph, recording, Order::Chain).is_err(),
        "an update while recording"
    );
    drop(Host::end(&mut stream));
}

#[test]
fn a_replay_touching_a_released_page_fails_naming_it() {
    let (_device, mut stream) = stream();
    let out = Host::allocate_device_page(&mut stream, 256).expect("page");
    let info = Host::allocate_device_page(&mut stream, 256).expect("page");
    upload_info(&mut stream, &info, 2.0);
    Host::begin(&mut stream).expect("begin");
    fill(&mut stream, &out, &info);
    let recording = Host::end(&mut stream).expect("ended");
    let graph = Host::instantiate(&mut stream, recording, Order::Chain).expect("graph");
    Host::replay(&graph, &mut stream).expect("replay while the pages live");
    let signal = Host::signal(&mut stream).expect("signal");
    Host::fence(&mut stream, signal).expect("fence");
    Host::release_device_page(&mut stream, out);
    let err = Host::replay(&graph, &mut stream).expect_err("released page");
    assert!(err.to_string().contains("device page"), "{err}");
    assert!(err.to_string().contains("released"), "{err}");
    Host::release_device_page(&mut stream, info);
}

#[test]
fn work_is_asynchronous_until_a_fence() {
    // A long queue of work is enqueued instantly and finished only at the
    // fence: the host backend is as asynchronous as a GPU.
    let (_device, mut stream) = stream();
    let out = Host::allocate_device_page(&mut stream, 1 << 20).expect("page");
    let info = Host::allocate_device_page(&mut stream, 256).expect("page");
    upload_info(&mut stream, &info, 3.0);
    for _ in 0..2000 {
        fill(&mut stream, &out, &info);
    }
    let signal = Host::signal(&mut stream).expect("signal");
    Host::fence(&mut stream, signal).expect("fence");
    let staging = Host::allocate_host_page(&mut stream, 16).expect("host page");
    Host::copy_to_host(
        &mut stream,
        DeviceSlice {
            page: &out,
            offset: 0,
            len: 16,
        },
        HostSlice {
            page: &staging,
            offset: 0,
            len: 16,
        },
    )
    .expect("copy back");
    let signal = Host::signal(&mut stream).expect("signal");
    Host::fence(&mut stream, signal).expect("fence");
    let mut bytes = [0u8; 16];
    Host::read_host(&staging, 0, &mut bytes);
    assert_eq!(bytes[0..4], 3.0f32.to_le_bytes());
}

#[test]
fn a_page_too_large_for_memory_is_an_error_not_a_panic() {
    let (device, mut stream) = stream();
    let huge = u64::MAX - 255;
    assert!(Host::allocate_device_page(&mut stream, huge).is_err());
    assert!(Host::allocate_host_page(&mut stream, huge).is_err());
    assert_eq!(device.live_pages(), 0, "no page was counted");
}

#[test]
fn a_faulting_kernel_is_sticky_for_its_stream_only() {
    use capture_core::{Access, Client, Signature};
    let client = Client::<Host>::open().expect("open");
    let faulty = capture_core::Kernel::new(
        backend_host::Kernel::new(
            Signature::new("faults")
                .binding(Access::Write)
                .workgroup([1, 1, 1]),
            |_, _| Err("out of cheese".into()),
        )
        .expect("kernel"),
    );
    let bad = client.create_stream().expect("stream");
    let good = client.create_stream().expect("stream");
    let x = client.create_f32(bad, &[1.0; 4]).expect("x");
    let y = client.create_f32(bad, &[2.0; 4]).expect("y");
    let z = client.create_f32(good, &[3.0; 4]).expect("z");
    client
        .launch(bad, &faulty, [1, 1, 1], &[&x], &[], &[])
        .expect("enqueued");
    let err = client.read_f32(&y).expect_err("the fault is reported");
    assert!(
        err.to_string().contains("faults") && err.to_string().contains("out of cheese"),
        "{err}"
    );
    assert!(client.read_f32(&y).is_err(), "sticky, as a GPU's fault is");
    assert_eq!(
        client.read_f32(&z).expect("another stream is not affected"),
        [3.0; 4]
    );
    drop((x, y));
    client
        .destroy_stream(bad)
        .expect("destroy the faulted stream");
    let fresh = client.create_stream().expect("a new stream");
    let w = client.create_f32(fresh, &[4.0; 4]).expect("w");
    assert_eq!(client.read_f32(&w).expect("the new stream works"), [4.0; 4]);
}

/// A host kernel that always panics.
fn panicking_kernel() -> capture_core::Kernel<Host> {
    use capture_core::Signature;
    capture_core::Kernel::new(
        backend_host::Kernel::new(
            Signature::new("panics")
                .binding(Access::Write)
                .workgroup([1, 1, 1]),
            |_, _| panic!("deliberate panic in a host kernel"),
        )
        .expect("kernel"),
    )
}

/// `issue` enqueues the panicking kernel over `x`, a buffer of a fresh
/// stream, and returns what it must keep until the stream goes. The panic is
/// reported by the next read, not a dead worker: the stream still destroys
/// (its worker joined, not hung), and a new stream works.
fn a_panic_is_a_fault<T>(
    issue: impl FnOnce(&capture_core::Client<Host>, StreamId, &capture_core::Buffer) -> T,
) {
    let client = capture_core::Client::<Host>::open().expect("open");
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[1.0; 4]).expect("x");
    let kept = issue(&client, stream, &x);
    let err = client.read_f32(&x).expect_err("the panic is reported");
    assert!(err.to_string().contains("kernel panics panicked"), "{err}");
    drop((kept, x));
    client
        .destroy_stream(stream)
        .expect("the worker joined, not hung");
    let fresh = client.create_stream().expect("a new stream");
    let y = client.create_f32(fresh, &[2.0; 4]).expect("y");
    assert_eq!(client.read_f32(&y).expect("works"), [2.0; 4]);
}

#[test]
fn a_kernel_panicking_in_a_replay_is_a_fault_not_a_dead_worker() {
    a_panic_is_a_fault(|client, stream, x| {
        let panics = panicking_kernel();
        // Recorded without a warmup, so the kernel first runs in the replay.
        let window = client.prepare(stream).expect("prepare");
        client.begin(stream, window).expect("begin");
        client
            .launch(stream, &panics, [1, 1, 1], &[x], &[], &[])
            .expect("recorded");
        let graph = client.instantiate(stream, window).expect("graph");
        client.replay(&graph).expect("replay enqueued");
        graph
    });
}

#[test]
fn a_panicking_kernel_is_a_fault_not_a_dead_worker() {
    a_panic_is_a_fault(|client, stream, x| {
        client
            .launch(stream, &panicking_kernel(), [1, 1, 1], &[x], &[], &[])
            .expect("enqueued");
    });
}

/// Launch `kernel` over the first 16 bytes of each of `pages`, in the
/// signature's access order, with 16 bytes of info.
fn launch_over(
    stream: &mut Stream,
    kernel: &backend_host::Kernel,
    pages: &[&backend_host::DevicePage],
    info: &backend_host::DevicePage,
) {
    let accesses = Host::signature(kernel).accesses();
    let bindings: Vec<Binding<'_, Host>> = pages
        .iter()
        .zip(accesses)
        .map(|(page, access)| Binding {
            slice: DeviceSlice {
                page: *page,
                offset: 0,
                len: 16,
            },
            access: *access,
        })
        .collect();
    Host::launch(
        stream,
        Launch {
            kernel,
            groups: [1, 1, 1],
            bindings: &bindings,
            info: Some(DeviceSlice {
                page: info,
                offset: 0,
                len: 16,
            }),
            params: &[],
        },
    )
    .expect("launch recorded");
}

#[test]
fn an_update_is_in_place_only_for_the_same_kernels_in_the_same_order() {
    let (device, mut stream) = stream();
    let fill = Host::builtin(&device, Builtin::Fill).expect("fill");
    let copy = Host::builtin(&device, Builtin::Copy).expect("copy");
    let pages: Vec<_> = (0..3)
        .map(|_| Host::allocate_device_page(&mut stream, 16).expect("page"))
        .collect();
    let info = Host::allocate_device_page(&mut stream, 16).expect("info");
    upload_info(&mut stream, &info, 1.0);
    let (a, b, c) = (&pages[0], &pages[1], &pages[2]);
    let mut record = |first: &backend_host::Kernel, second: &backend_host::Kernel, out: &_| {
        Host::begin(&mut stream).expect("begin");
        let one = |k: &backend_host::Kernel| {
            if Host::signature(k).accesses().len() == 1 {
                vec![out]
            } else {
                vec![a, out]
            }
        };
        launch_over(&mut stream, first, &one(first), &info);
        launch_over(&mut stream, second, &one(second), &info);
        Host::end(&mut stream).expect("end")
    };
    let recordings = [
        record(&fill, &copy, b),
        record(&fill, &copy, c),
        record(&copy, &fill, b),
        record(&fill, &fill, b),
    ];
    let [first, other_buffers, swapped, other_kernel] = recordings;
    let mut exec = Host::instantiate(&mut stream, first, Order::Chain).expect("instantiate");
    assert!(matches!(
        Host::update(&mut stream, &mut exec, other_buffers, Order::Chain),
        Ok(capture_core::Updated::InPlace)
    ));
    for (recording, what) in [(swapped, "the order"), (other_kernel, "a kernel")] {
        assert!(
            matches!(
                Host::update(&mut stream, &mut exec, recording, Order::Chain),
                Ok(capture_core::Updated::Topology(_))
            ),
            "a recording differing in {what} must be instantiated anew"
        );
    }
}

#[test]
fn conditionals_out_of_order_or_malformed_are_refused() {
    let (_device, mut stream) = stream();
    let page = Host::allocate_device_page(&mut stream, 256).expect("page");
    let flag = |offset: u64, len: u64| DeviceSlice::<Host> {
        page: &page,
        offset,
        len,
    };
    let refused = |result: Result<(), capture_core::DriverError>, says: &str| {
        let err = result.expect_err(says);
        assert!(err.to_string().contains(says), "{err}");
    };
    refused(
        Host::open_conditional(&mut stream, Conditional::If, flag(0, 4)),
        "not recording",
    );
    Host::begin(&mut stream).expect("begin");
    refused(Host::next_body(&mut stream), "no conditional is open");
    refused(
        Host::close_conditional(&mut stream, &[]),
        "no conditional is open",
    );
    for (offset, len) in [(0, 8), (2, 4), (0, 2)] {
        refused(
            Host::open_conditional(&mut stream, Conditional::If, flag(offset, len)),
            "the flag is not a u32",
        );
    }
    Host::open_conditional(&mut stream, Conditional::If, flag(0, 4)).expect("an if");
    refused(
        Host::next_body(&mut stream),
        "the if conditional has no more bodies",
    );
    refused(
        Host::close_conditional(&mut stream, &[Order::Chain, Order::Chain]),
        "the if conditional closed with 1 body(ies) and 2 order(s)",
    );
    Host::open_conditional(&mut stream, Conditional::IfElse, flag(4, 4)).expect("an if/else");
    refused(
        Host::close_conditional(&mut stream, &[Order::Chain]),
        "conditional closed with 1 body(ies) and 1 order(s)",
    );
    drop(Host::end(&mut stream));
    Host::release_device_page(&mut stream, page);
}

#[test]
fn the_host_takes_the_grids_cuda_takes() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let ran = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&ran);
    let count = backend_host::Kernel::new(
        capture_core::Signature::new("count")
            .binding(Access::Write)
            .workgroup([1, 1, 1]),
        move |_group, _buffers| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        },
    )
    .expect("count");
    let count = capture_core::Kernel::new(count);
    let client = capture_core::Client::<Host>::open().expect("open");
    let stream = client.create_stream().expect("stream");
    let out = client.create(stream, &[0; 4]).expect("buffer");
    // Wider in x than the portable 65,535 groups: CUDA's limit is 2^31 - 1.
    client
        .launch(stream, &count, [65_536, 1, 1], &[&out], &[], &[])
        .expect("as wide as CUDA takes");
    client.sync(stream).expect("sync");
    assert_eq!(ran.load(Ordering::Relaxed), 65_536);
    let err = client
        .launch(stream, &count, [1, 65_536, 1], &[&out], &[], &[])
        .expect_err("y is 65,535 at most, as on CUDA");
    assert!(err.to_string().contains("65536"), "{err}");
}
