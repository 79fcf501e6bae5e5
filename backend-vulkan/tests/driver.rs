//! The raw driver contract on whatever Vulkan device this machine has
//! (lavapipe on a machine without a GPU). Every test checks afterwards that
//! the validation layer reported no error.
//!
//! Each test skips, saying why, when no Vulkan device is available.

use std::sync::Arc;

mod common;

use common::{SCALE, scale_signature, scale_spirv};

use backend_vulkan::{
    Device, DevicePage, Executable, HostPage, Kernel, Recording, Stream, Vulkan, validation_counts,
};
use capture_core::{
    Access, Availability, Binding, Builtin, BuiltinInfo, Builtins, Dependencies, DeviceSlice,
    Driver, Error, GraphDriver, HostSlice, Launch, Order, Params, Signature, Updated, groups_for,
};

/// Bytes per slice slot; capture-core keeps binding offsets at multiples of 256.
const SLOT: u64 = 256;

fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes_of(n: usize) -> u64 {
    (n * 4) as u64
}

/// Writes `bytes` to `host` at `host_offset` and enqueues their copy to
/// `page` at `offset`.
fn stage(
    stream: &mut Stream,
    host: &HostPage,
    host_offset: u64,
    bytes: &[u8],
    page: &DevicePage,
    offset: u64,
) {
    Vulkan::write_host(host, host_offset, bytes);
    let len = bytes.len() as u64;
    Vulkan::copy_to_device(
        stream,
        HostSlice {
            page: host,
            offset: host_offset,
            len,
        },
        DeviceSlice { page, offset, len },
    )
    .expect("copy to device");
}

/// Enqueues a copy of `n` floats of `page` at `offset` into `host` at
/// `host_offset`.
fn enqueue_copy_out(
    stream: &mut Stream,
    page: &DevicePage,
    offset: u64,
    n: usize,
    host: &HostPage,
    host_offset: u64,
) {
    let len = bytes_of(n);
    Vulkan::copy_to_host(
        stream,
        DeviceSlice { page, offset, len },
        HostSlice {
            page: host,
            offset: host_offset,
            len,
        },
    )
    .expect("copy to host");
}

/// Ends the window recording on `stream` and instantiates it.
fn close(stream: &mut Stream) -> Executable {
    let recording = Vulkan::end(stream).expect("end");
    Vulkan::instantiate(stream, recording, Order::Chain).expect("instantiate")
}

/// Signals `stream` and waits for the signal.
fn sync_stream(stream: &mut Stream) {
    let signal = Vulkan::signal(stream).expect("signal");
    Vulkan::fence(stream, signal).expect("fence");
}

/// Reads `n` floats of `host` at `host_offset`.
fn read_floats(host: &HostPage, host_offset: u64, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    Vulkan::read_host(host, host_offset, &mut out);
    from_bytes(&out)
}

/// Launches `kernel` on `stream` with `buffers` (page, offset) in binding
/// order, each `len` bytes long, the info slice at `info` (page, offset)
/// when the kernel reads info, and `params`.
fn launch_raw(
    stream: &mut Stream,
    kernel: &Kernel,
    groups: [u32; 3],
    buffers: &[(&DevicePage, u64)],
    len: u64,
    info: Option<(&DevicePage, u64)>,
    params: &[u8],
) {
    let signature = Vulkan::signature(kernel);
    let bindings: Vec<Binding<'_, Vulkan>> = buffers
        .iter()
        .zip(signature.accesses())
        .map(|(&(page, offset), &access)| Binding {
            slice: DeviceSlice { page, offset, len },
            access,
        })
        .collect();
    let info = info.map(|(page, offset)| DeviceSlice {
        page,
        offset,
        len: u64::from(signature.info_bytes()),
    });
    Vulkan::launch(
        stream,
        Launch {
            kernel,
            groups,
            bindings: &bindings,
            info,
            params,
        },
    )
    .expect("launch");
}

/// Launches the builtin `kernel` on `stream` over `n` elements with
/// `buffers` (page, offset) in binding order and info at `info` (page,
/// offset).
fn launch_on(
    stream: &mut Stream,
    kernel: &Kernel,
    n: usize,
    info: (&DevicePage, u64),
    buffers: &[(&DevicePage, u64)],
) {
    launch_raw(
        stream,
        kernel,
        groups_for(n as u32),
        buffers,
        bytes_of(n),
        Some(info),
        &[],
    );
}

struct Fixture {
    device: Arc<Device>,
    stream: Stream,
    host: HostPage,
    info: DevicePage,
    next_info: u64,
}

fn open(test: &str) -> Option<Fixture> {
    match Vulkan::probe() {
        Availability::Available(_) => {}
        Availability::Unavailable(reason) => {
            eprintln!("skipping {test}: vulkan unavailable: {reason}");
            return None;
        }
    }
    Some(fixture(
        Vulkan::open().expect("open after a successful probe"),
    ))
}

/// A fixture on `device`.
fn fixture(device: Arc<Device>) -> Fixture {
    let mut stream = Vulkan::create_stream(&device).expect("create stream");
    let host = Vulkan::allocate_host_page(&mut stream, 1 << 20).expect("host page");
    let info = Vulkan::allocate_device_page(&mut stream, 64 * SLOT).expect("info page");
    Fixture {
        device,
        stream,
        host,
        info,
        next_info: 0,
    }
}

impl Fixture {
    fn kernel(&self, which: Builtin) -> Kernel {
        Vulkan::builtin(&self.device, which).expect("builtin")
    }

    fn page(&mut self, bytes: u64) -> DevicePage {
        Vulkan::allocate_device_page(&mut self.stream, bytes).expect("device page")
    }

    /// Writes `values` to the host page at `host_offset` and copies them to
    /// `page` at `offset`.
    fn upload(&mut self, host_offset: u64, values: &[f32], page: &DevicePage, offset: u64) {
        let bytes = to_bytes(values);
        stage(
            &mut self.stream,
            &self.host,
            host_offset,
            &bytes,
            page,
            offset,
        );
    }

    /// Enqueues a copy of `n` floats of `page` at `offset` into the host
    /// page at `host_offset`.
    fn enqueue_download(&mut self, page: &DevicePage, offset: u64, n: usize, host_offset: u64) {
        enqueue_copy_out(&mut self.stream, page, offset, n, &self.host, host_offset);
    }

    fn sync(&mut self) {
        sync_stream(&mut self.stream);
    }

    fn read(&self, host_offset: u64, n: usize) -> Vec<f32> {
        read_floats(&self.host, host_offset, n)
    }

    /// Downloads `n` floats, syncs, and returns them.
    fn download(&mut self, page: &DevicePage, offset: u64, n: usize) -> Vec<f32> {
        let host_offset = 512 * 1024;
        self.enqueue_download(page, offset, n, host_offset);
        self.sync();
        self.read(host_offset, n)
    }

    /// Stages info bytes for `n` elements and `scalar` in a fresh info slot.
    fn info(&mut self, n: u32, scalar: f32) -> u64 {
        let slot = self.next_info;
        self.next_info += 1;
        let offset = slot * SLOT;
        let bytes = BuiltinInfo::new(n, scalar).to_bytes();
        stage(
            &mut self.stream,
            &self.host,
            768 * 1024 + offset,
            &bytes,
            &self.info,
            offset,
        );
        offset
    }

    /// Launches `kernel` over `n` elements with `buffers` (page, offset) in
    /// binding order and info at `info`.
    fn launch(&mut self, kernel: &Kernel, n: usize, info: u64, buffers: &[(&DevicePage, u64)]) {
        launch_on(&mut self.stream, kernel, n, (&self.info, info), buffers);
    }

    /// Launches `fill` over `n` elements of `page` at `offset`, with info at
    /// `info`.
    fn fill(&mut self, fill: &Kernel, n: usize, info: u64, page: &DevicePage, offset: u64) {
        self.launch(fill, n, info, &[(page, offset)]);
    }

    /// Drops the stream and pages and checks the validation layer's verdict.
    fn finish(self) {
        let Fixture {
            device,
            stream,
            host,
            info,
            ..
        } = self;
        drop((host, info));
        drop(stream);
        check_validation(&device);
    }
}

/// x (zeros, at 0) and `n` ones a slot after it on one page, with the add
/// kernel and an info slot for `n` elements: each add puts one more into
/// every element of x.
struct AddChain {
    page: DevicePage,
    slot: u64,
    n: usize,
    add: Kernel,
    info: u64,
}

impl AddChain {
    fn new(f: &mut Fixture, n: usize) -> Self {
        let slot = bytes_of(n).next_multiple_of(SLOT);
        let page = f.page(2 * slot);
        f.upload(0, &vec![0.0; n], &page, 0);
        f.upload(4096, &vec![1.0; n], &page, slot);
        let add = f.kernel(Builtin::Add);
        let info = f.info(n as u32, 0.0);
        Self {
            page,
            slot,
            n,
            add,
            info,
        }
    }

    /// As [`AddChain::new`], for an `n` too large to stage through the host
    /// page: x and the ones are filled on the device.
    fn filled(f: &mut Fixture, n: usize) -> Self {
        let slot = bytes_of(n).next_multiple_of(SLOT);
        let page = f.page(2 * slot);
        let fill = f.kernel(Builtin::Fill);
        let zeros = f.info(n as u32, 0.0);
        let ones = f.info(n as u32, 1.0);
        f.fill(&fill, n, zeros, &page, 0);
        f.fill(&fill, n, ones, &page, slot);
        let add = f.kernel(Builtin::Add);
        let info = f.info(n as u32, 0.0);
        Self {
            page,
            slot,
            n,
            add,
            info,
        }
    }

    /// Launches one add of the ones into x.
    fn add(&self, f: &mut Fixture) {
        let buffers = [(&self.page, 0), (&self.page, self.slot)];
        f.launch(&self.add, self.n, self.info, &buffers);
    }

    /// Records `adds` adds plus a download of x into host bytes 0.., in a
    /// window; returns the executable.
    fn record(&self, f: &mut Fixture, adds: usize) -> Executable {
        Vulkan::begin(&mut f.stream).expect("begin");
        for _ in 0..adds {
            self.add(f);
        }
        f.enqueue_download(&self.page, 0, self.n, 0);
        close(&mut f.stream)
    }

    /// Downloads x, syncing.
    fn x(&self, f: &mut Fixture) -> Vec<f32> {
        f.download(&self.page, 0, self.n)
    }
}

fn check_validation(device: &Device) {
    let counts = validation_counts(device);
    eprintln!("validation: {counts:?}");
    assert_eq!(counts.errors, 0, "validation errors: {counts:?}");
    let layer_wanted = std::env::var(backend_vulkan::VALIDATION_ENV).map_or(true, |v| v != "0");
    let layer_installed =
        std::path::Path::new("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")
            .exists();
    if layer_wanted && layer_installed {
        assert!(
            counts.enabled,
            "the installed validation layer was not enabled"
        );
        if std::env::var(backend_vulkan::SYNC_VALIDATION_ENV).is_ok_and(|v| v == "1") {
            assert!(counts.sync, "sync validation was asked for but not enabled");
        }
    }
}

/// Opens a fixture for `test`, runs `body` on it, and checks the
/// validation layer's verdict once everything `body` made is dropped;
/// skips, saying why, when no Vulkan device is available.
fn run(test: &str, body: impl FnOnce(&mut Fixture)) {
    let Some(mut f) = open(test) else {
        return;
    };
    body(&mut f);
    f.finish();
}

#[test]
fn probe_reports_the_device() {
    match Vulkan::probe() {
        Availability::Available(info) => {
            assert!(!info.name.is_empty());
            assert!(!info.driver_version.is_empty());
            assert!(info.max_groups.iter().all(|&g| g >= 65_535), "{info:?}");
            let device = Vulkan::open().expect("open");
            assert_eq!(Vulkan::device_info(&device), info);
            let listed = Vulkan::devices().expect("devices");
            assert_eq!(listed.get(info.index), Some(&info), "{listed:?}");
            eprintln!("vulkan device: {info:?}");
            check_validation(&device);
        }
        Availability::Unavailable(reason) => {
            eprintln!("skipping probe_reports_the_device: {reason}");
        }
    }
}

#[test]
fn devices_are_listed_in_index_order_and_index_0_is_what_open_index_0_opens() {
    let listed = match Vulkan::devices() {
        Ok(listed) if !listed.is_empty() => listed,
        other => {
            eprintln!("skipping: no Vulkan device listed: {other:?}");
            return;
        }
    };
    eprintln!("vulkan devices: {listed:#?}");
    for (index, info) in listed.iter().enumerate() {
        assert_eq!(info.index, index);
        assert!(!info.name.is_empty() && !info.kind.is_empty(), "{info:?}");
    }
    match Vulkan::open_index(0) {
        Ok(device) => {
            assert_eq!(Vulkan::device_info(&device), listed[0]);
            assert!(listed[0].memory_bytes > 0, "{:?}", listed[0]);
            check_validation(&device);
        }
        // A device that cannot run the backend says why, as its kind does.
        Err(e) => assert!(listed[0].kind.contains('('), "{e} / {:?}", listed[0]),
    }
    let past = Vulkan::open_index(listed.len()).expect_err("no such device");
    assert!(past.message.contains(&listed.len().to_string()), "{past}");
}

#[test]
fn two_devices_opened_in_one_process_work_independently() {
    let Some(mut a) = open("two_devices_opened_in_one_process_work_independently") else {
        return;
    };
    let index = Vulkan::device_info(&a.device).index;
    let b_device = Vulkan::open_index(index).expect("open the same device again");
    assert!(!Arc::ptr_eq(&a.device, &b_device));
    let mut b = fixture(Arc::clone(&b_device));
    let fill_a = a.kernel(Builtin::Fill);
    let fill_b = b.kernel(Builtin::Fill);
    let page_a = a.page(SLOT);
    let page_b = b.page(SLOT);
    let info_a = a.info(64, 1.0);
    let info_b = b.info(64, 2.0);
    a.fill(&fill_a, 64, info_a, &page_a, 0);
    b.fill(&fill_b, 64, info_b, &page_b, 0);
    assert!(a.download(&page_a, 0, 64).iter().all(|&v| v == 1.0));
    // One device going leaves the other working.
    drop((fill_a, page_a));
    a.finish();
    b.fill(&fill_b, 64, info_b, &page_b, 0);
    assert!(b.download(&page_b, 0, 64).iter().all(|&v| v == 2.0));
    drop((fill_b, page_b));
    b.finish();
}

#[test]
fn eager_builtins_compute_expected_values() {
    run("eager_builtins_compute_expected_values", |f| {
        let n = 1000usize; // not a multiple of the workgroup size
        let slot = bytes_of(n).next_multiple_of(SLOT);
        let page = f.page(4 * slot);
        let (x, y, z, w) = (0, slot, 2 * slot, 3 * slot);
        let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
        f.upload(0, &xs, &page, x);

        let fill = f.kernel(Builtin::Fill);
        let add = f.kernel(Builtin::Add);
        let copy = f.kernel(Builtin::Copy);
        let axpy = f.kernel(Builtin::Axpy);

        let info_fill = f.info(n as u32, 2.0);
        f.fill(&fill, n, info_fill, &page, y);
        let info_n = f.info(n as u32, 0.0);
        f.launch(&add, n, info_n, &[(&page, x), (&page, y)]); // x = i + 2
        f.launch(&copy, n, info_n, &[(&page, x), (&page, z)]); // z = i + 2
        let info_axpy = f.info(n as u32, 0.5);
        f.launch(&axpy, n, info_axpy, &[(&page, y), (&page, z)]); // z = i + 3
        // Fewer elements than the buffer holds: the tail stays as filled.
        f.fill(&fill, n, info_fill, &page, w);
        let info_short = f.info(10, -1.0);
        f.fill(&fill, n, info_short, &page, w);

        let got_x = f.download(&page, x, n);
        let got_z = f.download(&page, z, n);
        let got_w = f.download(&page, w, n);
        for i in 0..n {
            assert_eq!(got_x[i], i as f32 + 2.0, "x[{i}]");
            assert_eq!(got_z[i], i as f32 + 3.0, "z[{i}]");
            assert_eq!(got_w[i], if i < 10 { -1.0 } else { 2.0 }, "w[{i}]");
        }
    });
}

#[test]
fn long_eager_chains_cross_batch_boundaries() {
    run("long_eager_chains_cross_batch_boundaries", |f| {
        let chain = AddChain::new(f, 130);
        // Every add reads and writes x, so each needs a barrier, across more
        // batches than a stream owns: later ones wait for earlier ones.
        let adds = 1500;
        for _ in 0..adds {
            chain.add(f);
        }
        let got = chain.x(f);
        assert!(got.iter().all(|&v| v == adds as f32), "{:?}", &got[..4]);
    });
}

#[test]
fn independent_launches_on_one_page_all_land() {
    run("independent_launches_on_one_page_all_land", |f| {
        let n = 64usize;
        let slots = 40u64;
        let page = f.page(slots * SLOT);
        let fill = f.kernel(Builtin::Fill);
        for s in 0..slots {
            let info = f.info(n as u32, s as f32);
            f.fill(&fill, n, info, &page, s * SLOT);
        }
        for s in 0..slots {
            f.enqueue_download(&page, s * SLOT, n, s * SLOT);
        }
        f.sync();
        for s in 0..slots {
            let got = f.read(s * SLOT, n);
            assert!(
                got.iter().all(|&v| v == s as f32),
                "slot {s}: {:?}",
                &got[..4]
            );
        }
    });
}

#[test]
fn graph_replays_accumulate() {
    run("graph_replays_accumulate", |f| {
        let n = 200usize;
        let chain = AddChain::new(f, n);
        let exec = chain.record(f, 2);

        // Recording ran nothing.
        assert_eq!(chain.x(f), vec![0.0; n]);

        Vulkan::upload(&exec, &mut f.stream).expect("upload");
        for _ in 0..3 {
            Vulkan::replay(&exec, &mut f.stream).expect("replay");
        }
        f.sync();
        // The window's own download left the result in host bytes 0..
        assert!(
            f.read(0, n).iter().all(|&v| v == 6.0),
            "{:?}",
            &f.read(0, 4)
        );
        assert!(chain.x(f).iter().all(|&v| v == 6.0));

        // Eager work after replays sees their results, and replays see eager work.
        let fill = f.kernel(Builtin::Fill);
        let info = f.info(n as u32, 10.0);
        f.fill(&fill, n, info, &chain.page, 0);
        Vulkan::replay(&exec, &mut f.stream).expect("replay");
        assert!(chain.x(f).iter().all(|&v| v == 12.0));
    });
}

#[test]
fn replay_without_upload_and_drop_while_pending() {
    run("replay_without_upload_and_drop_while_pending", |f| {
        let chain = AddChain::new(f, 300);
        let exec = chain.record(f, 5);
        for _ in 0..4 {
            Vulkan::replay(&exec, &mut f.stream).expect("replay");
        }
        // Dropped with replays possibly still pending: the drop waits for them.
        drop(exec);
        // The page outlives its owner's release while the executable ran.
        assert!(chain.x(f).iter().all(|&v| v == 20.0));
    });
}

#[test]
fn a_dropped_recording_leaves_the_stream_eager() {
    run("a_dropped_recording_leaves_the_stream_eager", |f| {
        let chain = AddChain::new(f, 100);

        Vulkan::begin(&mut f.stream).expect("begin");
        chain.add(f);
        // As the core does with a doomed window: ended, then dropped.
        let recording: Recording = Vulkan::end(&mut f.stream).expect("end");
        drop(recording);

        // The stream left recording mode: eager work runs.
        chain.add(f);
        assert!(chain.x(f).iter().all(|&v| v == 1.0));

        // And a new window can be recorded.
        let exec = chain.record(f, 1);
        Vulkan::replay(&exec, &mut f.stream).expect("replay");
        assert!(chain.x(f).iter().all(|&v| v == 2.0));
    });
}

#[test]
fn a_page_allocated_while_recording_is_usable() {
    run("a_page_allocated_while_recording_is_usable", |f| {
        let fill = f.kernel(Builtin::Fill);
        let info = f.info(64, 3.0);
        Vulkan::begin(&mut f.stream).expect("begin");
        // Refusing such a window is the core's business, not the backend's.
        let page = f.page(SLOT);
        f.fill(&fill, 64, info, &page, 0);
        let exec = close(&mut f.stream);
        Vulkan::replay(&exec, &mut f.stream).expect("replay");
        assert!(f.download(&page, 0, 64).iter().all(|&v| v == 3.0));
    });
}

#[test]
fn begin_submits_the_eager_work_and_the_window_runs_only_when_replayed() {
    run(
        "begin_submits_the_eager_work_and_the_window_runs_only_when_replayed",
        |f| {
            let page = f.page(SLOT);
            let fill = f.kernel(Builtin::Fill);
            let info = f.info(64, 1.0);
            f.fill(&fill, 64, info, &page, 0);
            let info2 = f.info(64, 7.0);
            Vulkan::begin(&mut f.stream).expect("begin");
            f.fill(&fill, 64, info2, &page, 0);
            let recording = Vulkan::end(&mut f.stream).expect("end");
            assert!(f.download(&page, 0, 64).iter().all(|&v| v == 1.0));
            let exec =
                Vulkan::instantiate(&mut f.stream, recording, Order::Chain).expect("instantiate");
            assert!(f.download(&page, 0, 64).iter().all(|&v| v == 1.0));
            Vulkan::replay(&exec, &mut f.stream).expect("replay");
            assert!(f.download(&page, 0, 64).iter().all(|&v| v == 7.0));
        },
    );
}

#[test]
fn streams_are_independent() {
    run("streams_are_independent", |f| {
        let mut other = Vulkan::create_stream(&f.device).expect("second stream");
        let page = f.page(2 * SLOT);
        let fill = f.kernel(Builtin::Fill);
        let info = f.info(64, 4.0);
        f.sync();
        Vulkan::begin(&mut f.stream).expect("begin");
        // Work on the other stream is not recorded.
        launch_on(&mut other, &fill, 64, (&f.info, info), &[(&page, SLOT)]);
        sync_stream(&mut other);
        let exec = close(&mut f.stream);
        assert!(f.download(&page, SLOT, 64).iter().all(|&v| v == 4.0));
        drop(other);
        drop(exec);
    });
}

#[test]
fn large_window_replays_on_another_stream() {
    run("large_window_replays_on_another_stream", |f| {
        let chain = AddChain::new(f, 100);
        // More launches than an eager batch holds: a window never submits.
        let exec = chain.record(f, 600);
        f.sync();
        let mut other = Vulkan::create_stream(&f.device).expect("second stream");
        Vulkan::upload(&exec, &mut other).expect("upload");
        Vulkan::replay(&exec, &mut other).expect("replay");
        Vulkan::replay(&exec, &mut other).expect("replay");
        sync_stream(&mut other);
        assert!(chain.x(f).iter().all(|&v| v == 1200.0));
        // Dropped after the stream it last replayed on.
        drop(other);
        drop(exec);
    });
}

#[test]
fn streams_on_separate_threads_share_the_queue() {
    run("streams_on_separate_threads_share_the_queue", |f| {
        let device = Arc::clone(&f.device);
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let device = Arc::clone(&device);
                std::thread::spawn(move || {
                    let mut stream = Vulkan::create_stream(&device).expect("stream");
                    let host = Vulkan::allocate_host_page(&mut stream, 4096).expect("host page");
                    let info = Vulkan::allocate_device_page(&mut stream, SLOT).expect("info page");
                    let data = Vulkan::allocate_device_page(&mut stream, SLOT).expect("data page");
                    let fill = Vulkan::builtin(&device, Builtin::Fill).expect("fill");
                    for round in 0..20 {
                        let value = (t * 100 + round) as f32;
                        let bytes = BuiltinInfo::new(64, value).to_bytes();
                        stage(&mut stream, &host, 0, &bytes, &info, 0);
                        launch_on(&mut stream, &fill, 64, (&info, 0), &[(&data, 0)]);
                        enqueue_copy_out(&mut stream, &data, 0, 64, &host, 1024);
                        sync_stream(&mut stream);
                        assert!(read_floats(&host, 1024, 64).iter().all(|&v| v == value));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker panicked");
        }
    });
}

#[test]
fn fence_on_a_signal_never_submitted_is_an_error() {
    run("fence_on_a_signal_never_submitted_is_an_error", |f| {
        let mut other = Vulkan::create_stream(&f.device).expect("second stream");
        let page = f.page(SLOT);
        let fill = f.kernel(Builtin::Fill);
        let info = f.info(64, 1.0);
        f.fill(&fill, 64, info, &page, 0);
        let signal = Vulkan::signal(&mut f.stream).expect("signal");
        // The other stream never submitted that far, so waiting would hang.
        assert!(Vulkan::fence(&mut other, signal).is_err());
        Vulkan::fence(&mut f.stream, signal).expect("fence");
    });
}

fn scale_params(n: usize, a: f32, b: f32) -> Params {
    Params::new().u32(n as u32).f32(a).f32(b)
}

/// The log of a refused build; panics on a kernel that was built.
fn compile_log(built: Result<Kernel, Error>, kernel: &str) -> String {
    match built {
        Err(Error::Compile { kernel: name, log }) => {
            assert_eq!(name, kernel);
            log
        }
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(kernel) => panic!("expected a compile error, got {kernel:?}"),
    }
}

impl Fixture {
    fn scale(&self) -> Kernel {
        Kernel::from_wgsl_checked(&self.device, SCALE, "scale", scale_signature())
            .expect("scale builds")
    }

    /// Launches a kernel that reads no info over `n` elements of each of
    /// `buffers`, in 64-thread workgroups.
    fn launch_user(
        &mut self,
        kernel: &Kernel,
        n: usize,
        buffers: &[(&DevicePage, u64)],
        params: &Params,
    ) {
        let groups = [(n as u32).div_ceil(64).max(1), 1, 1];
        launch_raw(
            &mut self.stream,
            kernel,
            groups,
            buffers,
            bytes_of(n),
            None,
            params.as_bytes(),
        );
    }
}

#[test]
fn builtins_carry_their_signatures() {
    run("builtins_carry_their_signatures", |f| {
        for which in Builtin::ALL {
            let kernel = f.kernel(which);
            assert_eq!(Vulkan::signature(&kernel), &which.signature());
        }
    });
}

#[test]
fn user_wgsl_kernels_take_their_parameters_by_value() {
    run("user_wgsl_kernels_take_their_parameters_by_value", |f| {
        let n = 100usize; // not a multiple of the workgroup size
        let page = f.page(2 * SLOT);
        let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
        f.upload(0, &xs, &page, 0);
        let checked = f.scale();
        assert_eq!(Vulkan::signature(&checked), &scale_signature());
        f.launch_user(&checked, n, &[(&page, 0)], &scale_params(n, 2.0, 1.0));
        // SAFETY: SCALE touches only `x[i]` for `i < n`, and every launch
        // below passes an `n` within the bound slice.
        let unchecked = unsafe { Kernel::from_wgsl(&f.device, SCALE, "scale", scale_signature()) }
            .expect("scale builds");
        // Only the first half: the rest keeps the first launch's values.
        f.launch_user(&unchecked, n, &[(&page, 0)], &scale_params(n / 2, 0.5, 0.0));
        let got = f.download(&page, 0, n);
        for (i, &v) in got.iter().enumerate() {
            let first = 2.0 * i as f32 + 1.0;
            let want = if i < n / 2 { first * 0.5 } else { first };
            assert_eq!(v, want, "x[{i}]");
        }
    });
}

#[test]
fn a_recorded_launch_replays_the_parameters_it_was_recorded_with() {
    run(
        "a_recorded_launch_replays_the_parameters_it_was_recorded_with",
        |f| {
            let n = 64usize;
            let page = f.page(SLOT);
            f.upload(0, &vec![1.0; n], &page, 0);
            let scale = f.scale();
            let record = |f: &mut Fixture, a: f32, b: f32| {
                Vulkan::begin(&mut f.stream).expect("begin");
                let params = scale_params(n, a, b);
                f.launch_user(&scale, n, &[(&page, 0)], &params);
                // The bytes were recorded by value: the caller's copy may go.
                drop(params);
                close(&mut f.stream)
            };
            let double = record(f, 2.0, 0.0);
            let plus_five = record(f, 1.0, 5.0);
            for exec in [&double, &plus_five, &double] {
                Vulkan::replay(exec, &mut f.stream).expect("replay");
            }
            // ((1 * 2) + 5) * 2
            assert!(f.download(&page, 0, n).iter().all(|&v| v == 14.0));
        },
    );
}

#[test]
fn a_kernel_dropped_while_its_work_may_run_lives_until_it_completes() {
    run(
        "a_kernel_dropped_while_its_work_may_run_lives_until_it_completes",
        |f| {
            let n = 64usize;
            let page = f.page(SLOT);
            f.upload(0, &vec![1.0; n], &page, 0);
            let scale = f.scale();
            Vulkan::begin(&mut f.stream).expect("begin");
            f.launch_user(&scale, n, &[(&page, 0)], &scale_params(n, 3.0, 0.0));
            let exec = close(&mut f.stream);
            // Eager work not yet submitted, then the only handle goes.
            f.launch_user(&scale, n, &[(&page, 0)], &scale_params(n, 2.0, 0.0));
            drop(scale);
            Vulkan::replay(&exec, &mut f.stream).expect("replay");
            Vulkan::replay(&exec, &mut f.stream).expect("replay");
            assert!(f.download(&page, 0, n).iter().all(|&v| v == 18.0));
            drop(exec);
        },
    );
}

#[test]
fn checked_wgsl_cannot_write_past_its_binding() {
    run("checked_wgsl_cannot_write_past_its_binding", |f| {
        let n = 64usize;
        let page = f.page(2 * SLOT);
        f.upload(0, &vec![0.0; n], &page, 0);
        f.upload(4096, &vec![7.0; n], &page, SLOT);
        let scale = f.scale();
        // The launch claims twice the elements the bound slice holds.
        let groups = [2, 1, 1];
        let params = scale_params(2 * n, 0.0, 1.0);
        launch_raw(
            &mut f.stream,
            &scale,
            groups,
            &[(&page, 0)],
            bytes_of(n),
            None,
            params.as_bytes(),
        );
        assert!(f.download(&page, 0, n).iter().all(|&v| v == 1.0));
        assert!(f.download(&page, SLOT, n).iter().all(|&v| v == 7.0));
    });
}

#[test]
fn user_spirv_builds_and_a_disagreeing_module_is_refused_naming_both_sides() {
    run(
        "user_spirv_builds_and_a_disagreeing_module_is_refused_naming_both_sides",
        |f| {
            let words = scale_spirv();
            // SAFETY: SCALE touches only `x[i]` for `i < n`, and the launch
            // passes `n` equal to the bound slice's element count.
            let scale =
                unsafe { Kernel::from_spirv(&f.device, &words, "scale", scale_signature()) }
                    .expect("scale builds from SPIR-V");
            let n = 10usize;
            let page = f.page(SLOT);
            f.upload(0, &vec![3.0; n], &page, 0);
            f.launch_user(&scale, n, &[(&page, 0)], &scale_params(n, -1.0, 0.5));
            assert!(f.download(&page, 0, n).iter().all(|&v| v == -2.5));

            let build = |signature: Signature| {
                // SAFETY: as above; these builds are refused before any launch.
                unsafe { Kernel::from_spirv(&f.device, &words, "scale", signature) }
            };
            let one_more = scale_signature().binding(Access::Read);
            let log = compile_log(build(one_more), "scale");
            assert!(
                log.contains("the module does not use binding 1")
                    && log.contains("the signature declares a read buffer"),
                "{log}"
            );
            let none = Signature::new("scale").param(4).param(4).param(4);
            let log = compile_log(build(none), "scale");
            assert!(
                log.contains("storage buffer binding 0")
                    && log.contains("the signature declares 0 buffer(s)"),
                "{log}"
            );
            let read = Signature::new("scale")
                .binding(Access::Read)
                .param(4)
                .param(4)
                .param(4);
            let log = compile_log(build(read), "scale");
            assert!(
                log.contains("is read_write storage in the module")
                    && log.contains("the signature declares read"),
                "{log}"
            );
            let short = Signature::new("scale")
                .binding(Access::ReadWrite)
                .param(4)
                .param(4);
            let log = compile_log(build(short), "scale");
            assert!(
                log.contains("push-constant block is 12 bytes")
                    && log.contains("8 parameter bytes"),
                "{log}"
            );
            let log = compile_log(
                // SAFETY: refused before any launch.
                unsafe { Kernel::from_spirv(&f.device, &words, "main", scale_signature()) },
                "scale",
            );
            assert!(log.contains("no entry point `main`"), "{log}");
            // Malformed modules are naga's log, never the driver's crash.
            let log = compile_log(
                // SAFETY: refused before any launch.
                unsafe { Kernel::from_spirv(&f.device, &words[..5], "scale", scale_signature()) },
                "scale",
            );
            assert!(
                log.contains("no entry point `scale` (it has: none)"),
                "{log}"
            );
            let mut mangled = words.clone();
            mangled[0] = 0xdead_beef;
            let log = compile_log(
                // SAFETY: refused before any launch.
                unsafe { Kernel::from_spirv(&f.device, &mangled, "scale", scale_signature()) },
                "scale",
            );
            assert!(log.starts_with("parsing SPIR-V"), "{log}");
            let cut = &words[..words.len() / 2];
            let log = compile_log(
                // SAFETY: refused before any launch.
                unsafe { Kernel::from_spirv(&f.device, cut, "scale", scale_signature()) },
                "scale",
            );
            eprintln!("a module cut in half: {log}");
        },
    );
}

#[test]
fn bad_wgsl_is_a_compile_error_carrying_nagas_message() {
    run("bad_wgsl_is_a_compile_error_carrying_nagas_message", |f| {
        let broken = "@compute @workgroup_size(64)\nfn broken(i: u32 {\n}\n";
        let naga_says = match naga::front::wgsl::parse_str(broken) {
            Err(e) => e.emit_to_string(broken),
            Ok(_) => panic!("the broken source parsed"),
        };
        let built =
            Kernel::from_wgsl_checked(&f.device, broken, "broken", Signature::new("broken"));
        let log = compile_log(built, "broken");
        assert_eq!(log, naga_says);
        assert!(log.contains("wgsl:2:"), "{log}");

        // Parses, but stores to a read-only buffer: naga's validator refuses.
        let writes_read_only = SCALE.replace("read_write", "read");
        let built =
            Kernel::from_wgsl_checked(&f.device, &writes_read_only, "scale", scale_signature());
        let log = compile_log(built, "scale");
        assert!(log.contains("error"), "{log}");
    });
}

#[test]
fn a_workgroup_size_mismatch_is_refused() {
    run("a_workgroup_size_mismatch_is_refused", |f| {
        let narrow = scale_signature().workgroup([32, 1, 1]);
        let log = compile_log(
            Kernel::from_wgsl_checked(&f.device, SCALE, "scale", narrow),
            "scale",
        );
        assert!(
            log.contains("workgroup size is 64x1x1") && log.contains("declares 32x1x1"),
            "{log}"
        );
        // Beyond every backend's limit: refused before naga is asked.
        let huge = scale_signature().workgroup([2048, 1, 1]);
        let log = compile_log(
            Kernel::from_wgsl_checked(&f.device, SCALE, "scale", huge),
            "scale",
        );
        assert!(log.contains("2048x1x1"), "{log}");
    });
}

/// Elements of the slow chains: 16 MiB per buffer, so a few dozen adds
/// keep any device busy for far longer than a host call takes.
const SLOW: usize = 1 << 22;

#[test]
fn signal_submits_nothing_and_is_done_turns_true_only_once_slow_work_completes() {
    run(
        "signal_submits_nothing_and_is_done_turns_true_only_once_slow_work_completes",
        |f| {
            f.sync();
            let idle = Vulkan::signal(&mut f.stream).expect("signal");
            assert_eq!(Vulkan::signal(&mut f.stream).expect("signal"), idle);
            assert!(Vulkan::is_done(&mut f.stream, idle).expect("is_done"));

            let chain = AddChain::filled(f, SLOW);
            f.sync();
            for _ in 0..48 {
                chain.add(f);
            }
            let slow = Vulkan::signal(&mut f.stream).expect("signal");
            assert!(slow > idle, "{slow:?} after {idle:?}");
            // Taking it again submits nothing and names the same point.
            assert_eq!(Vulkan::signal(&mut f.stream).expect("signal"), slow);
            // The check submits the batch, and the device cannot be done yet.
            assert!(!Vulkan::is_done(&mut f.stream, slow).expect("is_done"));
            Vulkan::fence(&mut f.stream, slow).expect("fence");
            assert!(Vulkan::is_done(&mut f.stream, slow).expect("is_done"));
            assert!(Vulkan::is_done(&mut f.stream, idle).expect("is_done"));
            let x = f.download(&chain.page, 0, 16);
            assert!(x.iter().all(|&v| v == 48.0), "{x:?}");
            // A signal of another stream's timeline that this one never
            // reached is an error, not a hang or a false answer.
            let mut other = Vulkan::create_stream(&f.device).expect("second stream");
            assert!(Vulkan::is_done(&mut other, slow).is_err());
        },
    );
}

#[test]
fn an_update_hands_the_recording_back_and_the_old_executable_finishes_its_replay() {
    run(
        "an_update_hands_the_recording_back_and_the_old_executable_finishes_its_replay",
        |f| {
            let chain = AddChain::filled(f, SLOW);
            let shown = 256usize;
            let (old_out, new_out) = (0u64, 256 * 1024u64);
            f.sync();

            // The old window: many adds over x, then its head to host bytes 0.
            Vulkan::begin(&mut f.stream).expect("begin");
            for _ in 0..48 {
                chain.add(f);
            }
            f.enqueue_download(&chain.page, 0, shown, old_out);
            let mut old = close(&mut f.stream);
            Vulkan::replay(&old, &mut f.stream).expect("replay");
            let old_replay = Vulkan::signal(&mut f.stream).expect("signal");

            // The new window: one add, then x's head elsewhere. The update
            // hands it back whole, for a new executable.
            Vulkan::begin(&mut f.stream).expect("begin");
            chain.add(f);
            f.enqueue_download(&chain.page, 0, shown, new_out);
            let recording = Vulkan::end(&mut f.stream).expect("end");
            let recording = match Vulkan::update(&mut f.stream, &mut old, recording, Order::Chain) {
                Ok(Updated::Topology(recording)) => recording,
                other => panic!("expected the recording back, got {other:?}"),
            };
            let new =
                Vulkan::instantiate(&mut f.stream, recording, Order::Chain).expect("instantiate");
            Vulkan::replay(&new, &mut f.stream).expect("replay the new executable");
            // Dropping the old executable while its replay may still run
            // waits for that replay.
            drop(old);
            assert!(Vulkan::is_done(&mut f.stream, old_replay).expect("is_done"));
            f.sync();
            assert!(f.read(old_out, shown).iter().all(|&v| v == 48.0));
            assert!(f.read(new_out, shown).iter().all(|&v| v == 49.0));
            Vulkan::replay(&new, &mut f.stream).expect("replay");
            f.sync();
            assert!(f.read(new_out, shown).iter().all(|&v| v == 50.0));
        },
    );
}

#[test]
fn an_executable_replayed_on_another_stream_waits_for_it_when_dropped() {
    run(
        "an_executable_replayed_on_another_stream_waits_for_it_when_dropped",
        |f| {
            let chain = AddChain::filled(f, SLOW);
            f.sync();
            Vulkan::begin(&mut f.stream).expect("begin");
            for _ in 0..16 {
                chain.add(f);
            }
            let exec = close(&mut f.stream);
            let mut other = Vulkan::create_stream(&f.device).expect("second stream");
            Vulkan::replay(&exec, &mut other).expect("replay on the other stream");
            let on_other = Vulkan::signal(&mut other).expect("signal");
            drop(exec);
            assert!(Vulkan::is_done(&mut other, on_other).expect("is_done"));
            assert!(f.download(&chain.page, 0, 16).iter().all(|&v| v == 16.0));
            drop(other);
        },
    );
}

#[test]
fn a_stream_waiting_for_an_event_copies_what_the_other_wrote_before_it() {
    run(
        "a_stream_waiting_for_an_event_copies_what_the_other_wrote_before_it",
        |f| {
            let chain = AddChain::filled(f, SLOW);
            f.sync();
            for _ in 0..8 {
                chain.add(f);
            }
            // The adds are pending in the eager batch: recording the event
            // submits them, so the other stream never waits for a
            // submission that is not coming.
            let event = Vulkan::record_event(&mut f.stream).expect("record");
            let mut other = Vulkan::create_stream(&f.device).expect("second stream");
            Vulkan::wait_event(&mut other, &event).expect("wait");
            drop(event);
            enqueue_copy_out(&mut other, &chain.page, 0, 16, &f.host, 0);
            sync_stream(&mut other);
            assert!(
                f.read(0, 16).iter().all(|&v| v == 8.0),
                "{:?}",
                f.read(0, 16)
            );
            // What the contract rules out is refused.
            let event = Vulkan::record_event(&mut other).expect("record on the second");
            assert!(
                Vulkan::wait_event(&mut other, &event).is_err(),
                "its own stream"
            );
            Vulkan::begin(&mut f.stream).expect("begin");
            assert!(
                Vulkan::wait_event(&mut f.stream, &event).is_err(),
                "recording"
            );
            assert!(Vulkan::record_event(&mut f.stream).is_err(), "recording");
            drop(Vulkan::end(&mut f.stream));
            Vulkan::wait_event(&mut f.stream, &event).expect("after the window");
            f.sync();
            drop(other);
        },
    );
}

/// Rounds of the test below: enough for lavapipe's queue thread to lose the
/// race in most runs when nothing holds it off.
const WAITED_ROUNDS: usize = 300;

#[test]
fn a_timeline_another_stream_waited_on_is_destroyed_only_once_the_queue_is_done_with_it() {
    run(
        "a_timeline_another_stream_waited_on_is_destroyed_only_once_the_queue_is_done_with_it",
        |f| {
            let short = AddChain::new(f, 1);
            let long = AddChain::filled(f, 1 << 18);
            f.sync();
            let device = Arc::clone(&f.device);
            let short_buffers = [(&short.page, 0), (&short.page, short.slot)];
            let long_buffers = [(&long.page, 0), (&long.page, long.slot)];
            // A submission that waits for work still running: lavapipe then
            // runs every later submission through its queue thread.
            let mut a = Vulkan::create_stream(&device).expect("a");
            for _ in 0..8 {
                launch_on(
                    &mut a,
                    &long.add,
                    long.n,
                    (&f.info, long.info),
                    &long_buffers,
                );
            }
            let event = Vulkan::record_event(&mut a).expect("record");
            let mut b = Vulkan::create_stream(&device).expect("b");
            Vulkan::wait_event(&mut b, &event).expect("wait");
            enqueue_copy_out(&mut b, &long.page, 0, 1, &f.host, 0);
            sync_stream(&mut b);
            assert_eq!(read_floats(&f.host, 0, 1), [8.0]);
            drop((event, a, b));
            for round in 1..=WAITED_ROUNDS {
                let mut a = Vulkan::create_stream(&device).expect("a");
                launch_on(&mut a, &short.add, 1, (&f.info, short.info), &short_buffers);
                let event = Vulkan::record_event(&mut a).expect("record");
                let mut b = Vulkan::create_stream(&device).expect("b");
                Vulkan::wait_event(&mut b, &event).expect("wait");
                enqueue_copy_out(&mut b, &short.page, 0, 1, &f.host, 0);
                // Submitted before the host waits for `a`: the queue thread
                // then holds `a`'s timeline until after `b`'s signal.
                let signal = Vulkan::signal(&mut b).expect("signal");
                Vulkan::is_done(&mut b, signal).expect("submit");
                // Only `b` keeps `a`'s timeline once `a` is gone: its fence
                // destroys the semaphore as soon as the host sees `b`'s
                // batch, which waited on it, complete.
                drop((event, a));
                Vulkan::fence(&mut b, signal).expect("fence");
                assert_eq!(read_floats(&f.host, 0, 1), [round as f32]);
                drop(b);
            }
        },
    );
}

/// Independent chains in [`Chains`], and launches in each.
const CHAINS: usize = 8;
const STEPS: usize = 6;

/// [`CHAINS`] chains of [`STEPS`] launches, each chain on its own page
/// holding x (at 0) and y (a slot after it): x += y, then y += 2x, in turn,
/// so a step run before the one it follows changes what the chain ends with.
/// With `copy_first`, each chain starts with a copy of y's start values from
/// the host, which the synchronization validation layer checks the first
/// launch's wait for.
struct Chains {
    pages: Vec<DevicePage>,
    slot: u64,
    n: usize,
    copy_first: bool,
    add: Kernel,
    axpy: Kernel,
    add_info: u64,
    axpy_info: u64,
}

impl Chains {
    fn new(f: &mut Fixture, n: usize, copy_first: bool) -> Self {
        let slot = bytes_of(n).next_multiple_of(SLOT);
        let pages = (0..CHAINS).map(|_| f.page(2 * slot)).collect();
        let add = f.kernel(Builtin::Add);
        let axpy = f.kernel(Builtin::Axpy);
        let add_info = f.info(n as u32, 0.0);
        let axpy_info = f.info(n as u32, 2.0);
        Self {
            pages,
            slot,
            n,
            copy_first,
            add,
            axpy,
            add_info,
            axpy_info,
        }
    }

    /// Operations in each chain.
    fn operations(&self) -> usize {
        STEPS + usize::from(self.copy_first)
    }

    /// Chain `c`'s host bytes: x's start values, then y's a slot after.
    fn host(&self, c: usize) -> u64 {
        c as u64 * 2 * self.slot
    }

    /// y's start values: i mod 7 for element i.
    fn y(&self) -> Vec<f32> {
        (0..self.n).map(|i| (i % 7) as f32).collect()
    }

    /// Puts every chain back to its start (x = c + 1 for chain c, y as
    /// [`Chains::y`]), synced.
    fn reset(&self, f: &mut Fixture) {
        let y = self.y();
        for (c, page) in self.pages.iter().enumerate() {
            f.upload(self.host(c), &vec![(c + 1) as f32; self.n], page, 0);
            f.upload(self.host(c) + self.slot, &y, page, self.slot);
        }
        f.sync();
    }

    /// Issues every chain's operations, chain after chain.
    fn issue(&self, f: &mut Fixture) {
        let y = self.y();
        for (c, page) in self.pages.iter().enumerate() {
            if self.copy_first {
                f.upload(self.host(c) + self.slot, &y, page, self.slot);
            }
            let buffers = [(page, 0), (page, self.slot)];
            for step in 0..STEPS {
                if step % 2 == 0 {
                    f.launch(&self.add, self.n, self.add_info, &buffers);
                } else {
                    f.launch(&self.axpy, self.n, self.axpy_info, &buffers);
                }
            }
        }
    }

    /// The dependency graph of [`Chains::issue`]: each operation after the
    /// one before it in its chain.
    fn dependencies(&self) -> Dependencies {
        let ops = self.operations();
        let edges = (0..CHAINS)
            .flat_map(|c| (0..ops - 1).map(move |s| (c * ops + s, c * ops + s + 1)))
            .collect();
        Dependencies {
            nodes: CHAINS * ops,
            edges,
            depth: ops,
            width: CHAINS,
        }
    }

    /// Every chain's x and y, synced.
    fn values(&self, f: &mut Fixture) -> Vec<Vec<f32>> {
        let mut values = Vec::new();
        for page in &self.pages {
            values.push(f.download(page, 0, self.n));
            values.push(f.download(page, self.slot, self.n));
        }
        values
    }
}

/// Captures [`Chains`] chain after chain, instantiates it in issue order and
/// as its dependency graph, and checks each executable's barriers and that
/// two replays leave what two eager runs do.
fn chains_replay_level_by_level(f: &mut Fixture, copy_first: bool) {
    let chains = Chains::new(f, 300, copy_first);
    chains.reset(f);
    chains.issue(f);
    chains.issue(f);
    let eager = chains.values(f);
    assert_ne!(eager[0], eager[2], "the chains start apart");

    let ops = chains.operations();
    let dependencies = chains.dependencies();
    // In issue order every operation but a chain's first conflicts with the
    // one before it; a chain's first touches nothing the chain before it
    // did, so it needs none. Level by level, one barrier between levels.
    let orders = [
        (Order::Chain, CHAINS * (ops - 1)),
        (Order::Dependencies(&dependencies), ops - 1),
    ];
    for (order, barriers) in orders {
        let name = match order {
            Order::Chain => "issue order",
            Order::Dependencies(_) => "dependency graph",
        };
        chains.reset(f);
        Vulkan::begin(&mut f.stream).expect("begin");
        chains.issue(f);
        let recording = Vulkan::end(&mut f.stream).expect("end");
        assert_eq!(recording.barriers(), 0, "not encoded yet");
        let exec = Vulkan::instantiate(&mut f.stream, recording, order).expect("instantiate");
        eprintln!(
            "{CHAINS} chains of {ops} operations, {name}: {} barriers",
            exec.barriers()
        );
        assert_eq!(exec.barriers(), barriers, "{name}");
        Vulkan::replay(&exec, &mut f.stream).expect("replay");
        Vulkan::replay(&exec, &mut f.stream).expect("replay");
        assert_eq!(chains.values(f), eager, "{name}");
    }

    // A graph numbering other operations than the window recorded is
    // refused, and the stream runs eager work again afterwards.
    Vulkan::begin(&mut f.stream).expect("begin");
    chains.issue(f);
    let recording = Vulkan::end(&mut f.stream).expect("end");
    let fewer = Dependencies {
        nodes: CHAINS * ops - 1,
        ..Dependencies::default()
    };
    let refused = Vulkan::instantiate(&mut f.stream, recording, Order::Dependencies(&fewer))
        .expect_err("a graph of fewer operations");
    assert!(refused.message.contains("numbers"), "{refused}");
    chains.reset(f);
    chains.issue(f);
    chains.issue(f);
    assert_eq!(chains.values(f), eager);
}

#[test]
fn independent_chains_replay_level_by_level_with_a_barrier_between_levels() {
    run(
        "independent_chains_replay_level_by_level_with_a_barrier_between_levels",
        |f| chains_replay_level_by_level(f, false),
    );
}

#[test]
fn chains_headed_by_copies_replay_level_by_level() {
    run("chains_headed_by_copies_replay_level_by_level", |f| {
        chains_replay_level_by_level(f, true)
    });
}
