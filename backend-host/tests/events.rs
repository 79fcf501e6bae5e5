//! Events on the raw host driver: a stream that waits for another's event
//! runs its later work only once the other's work before the event is done,
//! without the caller waiting; and what the contract rules out is refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backend_host::{DevicePage, Host, HostPage, Kernel, Stream};
use capture_core::{
    Access, Binding, DeviceSlice, Driver, GraphDriver, HostSlice, Launch, Params, Signature,
};

const SLOW: Duration = Duration::from_millis(300);

/// A kernel that writes its parameter into every `f32`, after sleeping
/// for `sleep`.
fn fill_after(sleep: Duration) -> Kernel {
    Kernel::new(
        Signature::new("fill_after")
            .binding(Access::Write)
            .param(4)
            .workgroup([1, 1, 1]),
        move |group, buffers| {
            std::thread::sleep(sleep);
            let value = group.params().f32()?;
            buffers[0].f32_mut()?.fill(value);
            Ok(())
        },
    )
    .expect("kernel")
}

/// On `a`: a slow kernel over another page, then a quick fill of `x` with
/// 7: `x` is written only once the slow kernel is done. The other page is
/// for the caller to keep until then.
fn slow_then_fill(a: &mut Stream, x: &DevicePage) -> DevicePage {
    let other = Host::allocate_device_page(a, 16).expect("other");
    launch(a, &fill_after(SLOW), &other, 1.0);
    launch(a, &fill_after(Duration::ZERO), x, 7.0);
    other
}

fn launch(stream: &mut Stream, kernel: &Kernel, page: &DevicePage, value: f32) {
    let bindings = [Binding {
        slice: DeviceSlice::<Host> {
            page,
            offset: 0,
            len: 16,
        },
        access: Access::Write,
    }];
    Host::launch(
        stream,
        Launch {
            kernel,
            groups: [1, 1, 1],
            bindings: &bindings,
            info: None,
            params: Params::new().f32(value).as_bytes(),
        },
    )
    .expect("launch");
}

fn download(stream: &mut Stream, page: &DevicePage, host: &HostPage) {
    Host::copy_to_host(
        stream,
        DeviceSlice {
            page,
            offset: 0,
            len: 16,
        },
        HostSlice {
            page: host,
            offset: 0,
            len: 16,
        },
    )
    .expect("copy");
}

fn read(host: &HostPage) -> Vec<f32> {
    let mut bytes = [0u8; 16];
    Host::read_host(host, 0, &mut bytes);
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_waiting_stream_sees_what_the_other_wrote_before_the_event() {
    let device = Host::open().expect("device");
    let mut a = Host::create_stream(&device).expect("a");
    let mut b = Host::create_stream(&device).expect("b");
    let x = Host::allocate_device_page(&mut a, 16).expect("x");
    let host = Host::allocate_host_page(&mut b, 16).expect("host");
    let started = Instant::now();
    let _other = slow_then_fill(&mut a, &x);
    let event = Host::record_event(&mut a).expect("record");
    Host::wait_event(&mut b, &event).expect("wait");
    drop(event);
    download(&mut b, &x, &host);
    assert!(
        started.elapsed() < SLOW / 2,
        "the caller waited: {:?}",
        started.elapsed()
    );
    let done = Host::signal(&mut b).expect("signal");
    Host::fence(&mut b, done).expect("fence");
    assert_eq!(read(&host), [7.0; 4], "b's copy ran after a's fill");
}

#[test]
fn a_stream_that_does_not_wait_runs_at_once() {
    // The same program without the wait: b's copy reads x before a wrote
    // it, which is what the event is there to prevent.
    let device = Host::open().expect("device");
    let mut a = Host::create_stream(&device).expect("a");
    let mut b = Host::create_stream(&device).expect("b");
    let x = Host::allocate_device_page(&mut a, 16).expect("x");
    let host = Host::allocate_host_page(&mut b, 16).expect("host");
    let _other = slow_then_fill(&mut a, &x);
    download(&mut b, &x, &host);
    let done = Host::signal(&mut b).expect("signal");
    Host::fence(&mut b, done).expect("fence");
    assert_ne!(read(&host), [7.0; 4]);
    let done = Host::signal(&mut a).expect("signal");
    Host::fence(&mut a, done).expect("fence");
}

#[test]
fn a_failure_before_the_event_fails_the_waiting_stream() {
    let device = Host::open().expect("device");
    let mut a = Host::create_stream(&device).expect("a");
    let mut b = Host::create_stream(&device).expect("b");
    let x = Host::allocate_device_page(&mut a, 16).expect("x");
    let failing = Kernel::new(
        Signature::new("fails").binding(Access::Write).param(4),
        |_, _| Err("this kernel fails".into()),
    )
    .expect("kernel");
    launch(&mut a, &failing, &x, 1.0);
    let event = Host::record_event(&mut a).expect("record");
    Host::wait_event(&mut b, &event).expect("wait");
    let done = Host::signal(&mut b).expect("signal");
    let err = Host::fence(&mut b, done).expect_err("b waited for failed work");
    assert!(err.to_string().contains("this kernel fails"), "{err}");
}

#[test]
fn events_the_contract_rules_out_are_refused() {
    let device = Host::open().expect("device");
    let other_device = Host::open_index(1).expect("device 1");
    let mut a = Host::create_stream(&device).expect("a");
    let mut b = Host::create_stream(&device).expect("b");
    let mut elsewhere = Host::create_stream(&other_device).expect("elsewhere");
    let event = Host::record_event(&mut a).expect("record");
    assert!(Host::wait_event(&mut a, &event).is_err(), "its own stream");
    assert!(
        Host::wait_event(&mut elsewhere, &event).is_err(),
        "another device"
    );
    Host::begin(&mut b).expect("begin");
    assert!(
        Host::wait_event(&mut b, &event).is_err(),
        "a recording stream"
    );
    assert!(Host::record_event(&mut b).is_err(), "on a recording stream");
    drop(Host::end(&mut b));
    Host::wait_event(&mut b, &event).expect("after the recording");
    let _: Arc<_> = device;
}
