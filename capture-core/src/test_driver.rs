//! A minimal synchronous driver for capture-core's own unit tests: work runs
//! at once (or is recorded), pages are plain vectors, and switches let a test
//! make `begin` refuse.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::driver::{
    Bodies, Conditional, DeviceInfo, DeviceSlice, Driver, DriverError, GraphDriver, HostSlice,
    Launch, Order, Updated,
};
use crate::kernels::signature::Signature;

pub(crate) struct TestDriver;

/// The edges an instantiate or update was handed, `None` for a chain.
pub(crate) type Handed = Option<Vec<(usize, usize)>>;

#[derive(Default)]
pub(crate) struct TestDevice {
    pub refuse_begin: AtomicBool,
    pub refuse_upload: AtomicBool,
    pub refuse_replay: AtomicBool,
    /// Waits on another stream's event.
    pub waits: AtomicUsize,
    /// Asked whether work is done, the device answers not yet, as one
    /// behind its queue would; a fence still waits for it.
    pub busy: AtomicBool,
    /// Fences waited on: each a sync of some stream.
    pub fences: AtomicUsize,
    /// The edges each instantiate and update was handed: `None` for a chain.
    pub orders: Mutex<Vec<Handed>>,
    pub pages: AtomicUsize,
    /// Streams created and not yet dropped.
    pub streams: AtomicUsize,
}

impl TestDevice {
    /// Note the order an instantiate or update was handed.
    fn handed(&self, order: Order<'_>) {
        let edges = match order {
            Order::Chain => None,
            Order::Dependencies(graph) => Some(graph.edges.clone()),
        };
        if let Ok(mut orders) = self.orders.lock() {
            orders.push(edges);
        }
    }
}

pub(crate) type Page = Arc<Mutex<Vec<u8>>>;

/// One unit of work: a byte copy between pages.
type Op = (Page, usize, Page, usize, usize);

pub(crate) struct TestStream {
    device: Arc<TestDevice>,
    recording: Option<Vec<Op>>,
}

fn run(op: &Op) {
    let (src, src_off, dst, dst_off, len) = op;
    let data = src.lock().map(|s| s[*src_off..src_off + len].to_vec());
    if let (Ok(data), Ok(mut dst)) = (data, dst.lock()) {
        dst[*dst_off..dst_off + len].copy_from_slice(&data);
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        self.device.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TestStream {
    fn issue(&mut self, op: Op) {
        match &mut self.recording {
            Some(ops) => ops.push(op),
            None => run(&op),
        }
    }
}

fn copy(src: &Page, src_offset: u64, dst: &Page, dst_offset: u64, len: u64) -> Op {
    (
        src.clone(),
        src_offset as usize,
        dst.clone(),
        dst_offset as usize,
        len as usize,
    )
}

/// Whether `stream` may be fenced or evented: not while it records.
fn idle(stream: &TestStream) -> Result<(), DriverError> {
    match stream.recording {
        Some(_) => Err(DriverError::new("test", "fence", "while recording")),
        None => Ok(()),
    }
}

fn page(bytes: u64) -> Page {
    Arc::new(Mutex::new(vec![0; bytes as usize]))
}

impl Driver for TestDriver {
    type Device = TestDevice;
    type Stream = TestStream;
    type DevicePage = Page;
    type HostPage = Page;
    type Signal = ();
    type Kernel = Signature;
    type Event = ();
    const NAME: &'static str = "test";

    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        Ok(vec![DeviceInfo::new("test", "0")])
    }
    fn open_index(_: usize) -> Result<Arc<TestDevice>, DriverError> {
        Ok(Arc::default())
    }
    fn open() -> Result<Arc<TestDevice>, DriverError> {
        Ok(Arc::default())
    }
    fn device_info(_: &TestDevice) -> DeviceInfo {
        DeviceInfo::new("test", "0")
    }
    fn signature(kernel: &Signature) -> &Signature {
        kernel
    }
    fn is_stream_of(device: &Arc<TestDevice>, stream: &TestStream) -> bool {
        Arc::ptr_eq(device, &stream.device)
    }

    fn create_stream(device: &Arc<TestDevice>) -> Result<TestStream, DriverError> {
        device.streams.fetch_add(1, Ordering::SeqCst);
        Ok(TestStream {
            device: device.clone(),
            recording: None,
        })
    }
    fn allocate_device_page(stream: &mut TestStream, bytes: u64) -> Result<Page, DriverError> {
        stream.device.pages.fetch_add(1, Ordering::SeqCst);
        Ok(page(bytes))
    }
    fn release_device_page(stream: &mut TestStream, _: Page) {
        stream.device.pages.fetch_sub(1, Ordering::SeqCst);
    }
    fn allocate_host_page(stream: &mut TestStream, bytes: u64) -> Result<Page, DriverError> {
        Self::allocate_device_page(stream, bytes)
    }
    fn release_host_page(stream: &mut TestStream, page: Page) {
        Self::release_device_page(stream, page);
    }
    fn write_host(page: &Page, offset: u64, bytes: &[u8]) {
        if let Ok(mut page) = page.lock() {
            page[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        }
    }
    fn read_host(page: &Page, offset: u64, out: &mut [u8]) {
        if let Ok(page) = page.lock() {
            out.copy_from_slice(&page[offset as usize..offset as usize + out.len()]);
        }
    }
    fn copy_to_device(
        stream: &mut TestStream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.issue(copy(src.page, src.offset, dst.page, dst.offset, src.len));
        Ok(())
    }
    fn copy_to_host(
        stream: &mut TestStream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.issue(copy(src.page, src.offset, dst.page, dst.offset, src.len));
        Ok(())
    }
    /// The test kernel copies its first binding into its second.
    fn launch(stream: &mut TestStream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        if let [src, dst, ..] = launch.bindings {
            let (src, dst) = (src.slice, dst.slice);
            stream.issue(copy(
                src.page,
                src.offset,
                dst.page,
                dst.offset,
                src.len.min(dst.len),
            ));
        }
        Ok(())
    }
    fn signal(_: &mut TestStream) -> Result<(), DriverError> {
        Ok(())
    }
    fn fence(stream: &mut TestStream, _: ()) -> Result<(), DriverError> {
        idle(stream)?;
        stream.device.fences.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn is_done(stream: &mut TestStream, _: ()) -> Result<bool, DriverError> {
        idle(stream).map(|()| !stream.device.busy.load(Ordering::SeqCst))
    }
    // Work runs as it is issued, so every event has completed already.
    fn record_event(stream: &mut TestStream) -> Result<(), DriverError> {
        idle(stream)
    }
    fn wait_event(stream: &mut TestStream, _: &()) -> Result<(), DriverError> {
        idle(stream)?;
        stream.device.waits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl GraphDriver for TestDriver {
    type Recording = Vec<Op>;
    type Executable = Vec<Op>;

    fn begin(stream: &mut TestStream) -> Result<(), DriverError> {
        if stream.device.refuse_begin.load(Ordering::SeqCst) {
            return Err(DriverError::new("test", "begin", "refused"));
        }
        stream.recording = Some(Vec::new());
        Ok(())
    }
    fn end(stream: &mut TestStream) -> Result<Vec<Op>, DriverError> {
        stream
            .recording
            .take()
            .ok_or_else(|| DriverError::new("test", "end capture", "not recording"))
    }
    // Work runs in issue order, whatever order the graph may keep.
    fn instantiate(
        stream: &mut TestStream,
        ops: Vec<Op>,
        order: Order<'_>,
    ) -> Result<Vec<Op>, DriverError> {
        stream.device.handed(order);
        Ok(ops)
    }
    fn update(
        stream: &mut TestStream,
        exec: &mut Vec<Op>,
        ops: Vec<Op>,
        order: Order<'_>,
    ) -> Result<Updated<Vec<Op>>, DriverError> {
        stream.device.handed(order);
        if exec.len() != ops.len() {
            return Ok(Updated::Topology(ops));
        }
        *exec = ops;
        Ok(Updated::InPlace)
    }
    // Bodies that cannot skip a copy, as Vulkan's; their work is recorded
    // inline, for tests of what the core refuses in one.
    fn conditionals(_: &TestStream) -> Result<Bodies, String> {
        Ok(Bodies { copies: false })
    }
    fn open_conditional(
        stream: &mut TestStream,
        _: Conditional,
        _: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        match stream.recording {
            Some(_) => Ok(()),
            None => Err(DriverError::new(
                "test",
                "open conditional",
                "not recording",
            )),
        }
    }
    fn next_body(_: &mut TestStream) -> Result<(), DriverError> {
        Ok(())
    }
    fn close_conditional(_: &mut TestStream, _: &[Order<'_>]) -> Result<(), DriverError> {
        Ok(())
    }
    fn upload(_: &Vec<Op>, stream: &mut TestStream) -> Result<(), DriverError> {
        if stream.device.refuse_upload.load(Ordering::SeqCst) {
            return Err(DriverError::new("test", "upload", "refused"));
        }
        Ok(())
    }
    fn replay(exec: &Vec<Op>, stream: &mut TestStream) -> Result<(), DriverError> {
        if stream.device.refuse_replay.load(Ordering::SeqCst) {
            return Err(DriverError::new("test", "replay", "refused"));
        }
        exec.iter().for_each(run);
        Ok(())
    }
}

mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::TestDriver;
    use crate::client::{Client, Pass};
    use crate::driver::Access;
    use crate::error::Error;
    use crate::interleave::{self, Point};
    use crate::streams::capturing::Phase;
    use crate::streams::state::Config;

    fn client() -> Client<TestDriver> {
        client_with(Config::default())
    }

    fn client_with(config: Config) -> Client<TestDriver> {
        Client::with_device(std::sync::Arc::default(), config)
    }

    /// A kernel of the test driver binding `accesses`.
    fn kernel(name: &str, accesses: &[Access]) -> crate::client::Kernel<TestDriver> {
        crate::client::Kernel::new(
            crate::kernels::signature::Signature::new(name).bindings(accesses),
        )
    }

    #[test]
    fn a_foreign_operation_is_issued_like_a_launch_and_a_kernel_is_not_one() {
        let c = client();
        let s = c.create_stream().unwrap();
        let x = c.create_f32(s, &[1.0; 4]).unwrap();
        let y = c.create_f32(s, &[0.0; 4]).unwrap();
        let signature =
            crate::kernels::signature::Signature::foreign("op", &[Access::Read, Access::Write]);
        let op = crate::client::Kernel::<TestDriver>::new(signature);
        c.foreign(s, &op, &[&x, &y]).unwrap();
        let k = kernel("k", &[Access::Read, Access::Write]);
        match c.foreign(s, &k, &[&x, &y]) {
            Err(Error::BadLaunch(why)) => assert!(why.contains("not a foreign operation"), "{why}"),
            other => panic!("a kernel as a foreign operation: {other:?}"),
        }
        assert!(matches!(
            c.foreign(s, &op, &[&x]),
            Err(Error::KernelMismatch { .. })
        ));
        let (graph, ()) = c.capture(s, |_| c.foreign(s, &op, &[&x, &y])).unwrap();
        assert_eq!(c.graph_info(&graph).unwrap().launches, 1);
        c.replay(&graph).unwrap();
    }

    /// A kernel of the test driver writing one buffer, with 4 info bytes.
    fn info_kernel(name: &str) -> crate::client::Kernel<TestDriver> {
        crate::client::Kernel::new(
            crate::kernels::signature::Signature::new(name)
                .binding(Access::Write)
                .info(4),
        )
    }

    /// `N` new streams of `client`.
    fn streams<const N: usize>(client: &Client<TestDriver>) -> [crate::ids::StreamId; N] {
        std::array::from_fn(|_| client.create_stream().expect("stream"))
    }

    #[test]
    fn a_write_in_a_body_that_cannot_skip_one_is_refused_only_while_recording() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let flag = client.create(stream, &1u32.to_le_bytes()).expect("flag");
        let x = client.create(stream, &[0; 8]).expect("x");
        // Eagerly the host decides: the write runs.
        let ran = client.if_flag(stream, &flag, || client.write(&x, &[1; 8]));
        assert_eq!(ran, Ok(crate::Ran::Branch(Some(0))));
        assert_eq!(client.read(&x), Ok(vec![1; 8]));
        let window = client.prepare(stream).expect("prepare");
        client.write(&x, &[2; 8]).expect("warmup");
        client.begin(stream, window).expect("begin");
        client
            .write(&x, &[3; 8])
            .expect("a write outside a body records");
        let err = client
            .if_flag(stream, &flag, || client.write(&x, &[4; 8]))
            .expect_err("a write in a body");
        assert!(
            matches!(
                err,
                Error::InBody {
                    what: "a write",
                    ..
                }
            ),
            "{err}"
        );
        client
            .if_flag(stream, &flag, || Ok(()))
            .expect("an empty body records");
        let err = client.instantiate(stream, window).expect_err("doomed");
        assert!(matches!(err.root(), Error::InBody { .. }), "{err}");
    }

    #[test]
    fn the_client_is_clone_send_and_sync() {
        fn check<T: Clone + Send + Sync>() {}
        check::<Client<TestDriver>>();
        check::<crate::Buffer>();
        check::<crate::GraphHandle<TestDriver>>();
    }

    #[test]
    fn a_refused_begin_unwinds_everything() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let before = client.usage(stream).expect("usage");
        let window = client.prepare(stream).expect("prepare");
        let warm = client.create(stream, &[1; 64]).expect("warmup allocation");
        drop(warm);
        client.device().refuse_begin.store(true, Ordering::SeqCst);
        let err = client.begin(stream, window).expect_err("refused");
        assert!(matches!(err, Error::Driver(_)), "{err}");
        assert_eq!(client.phase(stream).expect("phase"), Phase::None);
        client.sync(stream).expect("sync works: not recording");
        let after = client.usage(stream).expect("usage");
        assert_eq!(
            after.device.in_use_bytes, before.device.in_use_bytes,
            "warmup's slice is free"
        );
        client.device().refuse_begin.store(false, Ordering::SeqCst);
        let window = client.prepare(stream).expect("retry prepare");
        client.begin(stream, window).expect("retry begin");
        client.instantiate(stream, window).expect("graph");
    }

    #[test]
    fn replays_copy_through_recorded_launches() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let src = client.create(stream, &[7; 32]).expect("src");
        let dst = client.create(stream, &[0; 32]).expect("dst");
        let kernel = crate::client::Kernel::<TestDriver>::new(
            crate::kernels::signature::Signature::new("copy")
                .bindings(&[Access::Read, Access::Write])
                .info(1),
        );
        let (graph, pass) = client
            .capture(stream, |pass| {
                client.launch(stream, &kernel, [1, 1, 1], &[&src, &dst], &[1], &[])?;
                Ok(pass)
            })
            .expect("capture");
        assert_eq!(pass, Pass::Record);
        client.write(&dst, &[0; 32]).expect("reset");
        client.write(&src, &[9; 32]).expect("new input");
        client.replay(&graph).expect("replay");
        assert_eq!(client.read(&dst).expect("read"), vec![9; 32]);
        // The handle replays by itself, and by id through the client.
        client.write(&src, &[3; 32]).expect("another input");
        graph.replay().expect("the handle's replay");
        assert_eq!(client.read(&dst).expect("read"), vec![3; 32]);
        client.write(&src, &[4; 32]).expect("a third input");
        client.replay_id(graph.id()).expect("replay by id");
        assert_eq!(client.read(&dst).expect("read"), vec![4; 32]);
        let unknown = client.replay_id(crate::ids::GraphId(9999));
        assert!(
            matches!(unknown, Err(Error::UnknownGraph(_))),
            "{unknown:?}"
        );
        client.destroy_stream(stream).expect("destroy the stream");
        let gone = graph.replay();
        assert!(matches!(gone, Err(Error::UnknownGraph(_))), "{gone:?}");
    }

    #[test]
    fn a_graph_keeps_the_kernels_it_launches_until_its_work_is_done() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let src = client.create(stream, &[7; 32]).expect("src");
        let dst = client.create(stream, &[0; 32]).expect("dst");
        let (first, second) = (copy_kernel(2), copy_kernel(2));
        let held =
            |kernel: &crate::client::Kernel<TestDriver>| std::sync::Arc::downgrade(&kernel.0);
        let (first_held, second_held) = (held(&first), held(&second));
        let (graph, ()) = client
            .capture(stream, |_| {
                for _ in 0..3 {
                    client.launch(stream, &first, [1, 1, 1], &[&src, &dst], &[], &[])?;
                }
                Ok(())
            })
            .expect("capture");
        drop(first);
        assert_eq!(first_held.strong_count(), 1, "the graph holds it, once");
        client
            .replay(&graph)
            .expect("replay with the handle dropped");
        // A recapture launching another kernel swaps the holds, the old one
        // kept until the device is past the replays enqueued before.
        client
            .recapture(&graph, |_| {
                client.launch(stream, &second, [1, 1, 1], &[&src, &dst], &[], &[])
            })
            .expect("recapture");
        drop(second);
        assert_eq!(second_held.strong_count(), 1, "the graph holds the new one");
        client.sync(stream).expect("sync");
        client.replay(&graph).expect("replay");
        client.sync(stream).expect("past the old work");
        assert_eq!(first_held.strong_count(), 0, "the old work's kernel went");
        client.destroy(&graph).expect("destroy");
        assert_eq!(
            second_held.strong_count(),
            0,
            "a destroyed graph holds none"
        );
    }

    fn copy_kernel(bindings: usize) -> crate::client::Kernel<TestDriver> {
        let mut accesses = vec![Access::Read; bindings];
        accesses[1] = Access::Write;
        kernel("copy", &accesses)
    }

    /// A client and stream with `src` (sixteen 5s), `dst` (sixteen 0s) and
    /// the copy kernel between them.
    struct Copying {
        client: Client<TestDriver>,
        stream: crate::ids::StreamId,
        src: crate::Buffer,
        dst: crate::Buffer,
        kernel: crate::client::Kernel<TestDriver>,
    }

    impl Copying {
        fn new() -> Self {
            let client = client();
            let stream = client.create_stream().expect("stream");
            let src = client.create(stream, &[5; 16]).expect("src");
            let dst = client.create(stream, &[0; 16]).expect("dst");
            Self {
                client,
                stream,
                src,
                dst,
                kernel: copy_kernel(2),
            }
        }

        /// [`Copying::new`] and a graph of one copy, captured.
        fn with_graph() -> (Self, crate::GraphHandle<TestDriver>) {
            let fx = Self::new();
            let (graph, ()) = fx
                .client
                .capture(fx.stream, |_| fx.launch())
                .expect("capture");
            (fx, graph)
        }

        /// Copy `src` into `dst`.
        fn launch(&self) -> Result<(), Error> {
            let buffers = [&self.src, &self.dst];
            self.client
                .launch(self.stream, &self.kernel, [1, 1, 1], &buffers, &[], &[])
        }
    }

    #[test]
    fn a_buffer_or_graph_outliving_its_stream_keeps_nothing_of_the_driver() {
        let (fx, graph) = Copying::with_graph();
        let device = fx.client.device().clone();
        fx.launch().expect("a launch on a live stream");
        graph.replay().expect("a replay on a live stream");
        assert_eq!(device.streams.load(Ordering::SeqCst), 1);
        fx.client.destroy_stream(fx.stream).expect("destroy");
        assert_eq!(
            device.streams.load(Ordering::SeqCst),
            0,
            "the driver's stream goes with the stream, buffers or not"
        );
        assert_eq!(device.pages.load(Ordering::SeqCst), 0);
        // Reached through the buffers' own hold on the stream's slot.
        let gone = fx.launch();
        assert!(matches!(gone, Err(Error::UnknownStream(_))), "{gone:?}");
        // Reached through the handle's hold on the slot: the graph went
        // with its stream.
        let gone = graph.replay();
        assert!(matches!(gone, Err(Error::UnknownGraph(_))), "{gone:?}");
    }

    #[test]
    fn launches_and_handle_replays_never_wait_for_the_map_of_streams() {
        let (fx, graph) = Copying::with_graph();
        let held = fx.client.server().expect("server").hold_streams();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let outcome = fx.launch().and_then(|()| graph.replay());
                done.send(outcome).expect("the test waits");
            });
            // Were either to ask the map, it would wait for `held`.
            let outcome = finished.recv_timeout(std::time::Duration::from_secs(10));
            drop(held);
            assert!(
                matches!(outcome, Ok(Ok(()))),
                "a launch and a replay while the map is held: {outcome:?}"
            );
        });
    }

    /// Run `call` over and over on another thread while this one destroys
    /// `fx`'s stream, once the first call started: how many succeeded before
    /// an error `ended` accepts stopped it (any other error is returned).
    fn race_the_destroy(
        fx: &Copying,
        call: impl Fn() -> Result<(), Error> + Sync,
        ended: fn(&Error) -> bool,
    ) -> Result<usize, Error> {
        let started = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let caller = scope.spawn(|| {
                let mut done = 0usize;
                loop {
                    started.store(true, Ordering::SeqCst);
                    match call() {
                        Ok(()) => done += 1,
                        Err(err) if ended(&err) => return Ok(done),
                        Err(other) => return Err(other),
                    }
                }
            });
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            fx.client.destroy_stream(fx.stream).expect("destroy");
            caller.join().expect("the calling thread does not panic")
        })
    }

    #[test]
    fn launches_racing_their_streams_destroy_end_unknown() {
        let fx = Copying::new();
        let launched = race_the_destroy(
            &fx,
            || fx.launch(),
            |err| matches!(err, Error::UnknownStream(_)),
        );
        assert!(launched.is_ok(), "{launched:?}");
        assert_eq!(fx.client.device().streams.load(Ordering::SeqCst), 0);
    }

    // The one call that runs the caller's code under a stream's lock is the
    // benches' raw access.
    #[cfg(feature = "raw")]
    #[test]
    fn a_panic_under_a_streams_lock_poisons_that_stream_alone() {
        // `with_raw_stream` runs the caller's closure under the stream's
        // lock: a panic there leaves the stream's state unknown, so every
        // later call on it is refused, by whichever path it takes to the
        // lock (a launch through its buffers, a replay through its handle,
        // the rest through the map), while other streams carry on.
        let (fx, graph) = Copying::with_graph();
        let device = fx.client.device().clone();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fx.client
                .with_raw_stream(fx.stream, &[&fx.src], |_, _| panic!("the caller's code"))
        }));
        assert!(panicked.is_err());
        let launched = fx.launch();
        assert!(matches!(launched, Err(Error::Poisoned)), "{launched:?}");
        let replayed = graph.replay();
        assert!(matches!(replayed, Err(Error::Poisoned)), "{replayed:?}");
        let synced = fx.client.sync(fx.stream);
        assert!(matches!(synced, Err(Error::Poisoned)), "{synced:?}");

        let other = fx.client.create_stream().expect("another stream");
        let src = fx.client.create(other, &[7; 16]).expect("src");
        let dst = fx.client.create(other, &[0; 16]).expect("dst");
        fx.client
            .launch(other, &fx.kernel, [1, 1, 1], &[&src, &dst], &[], &[])
            .expect("a launch on another stream");
        assert_eq!(fx.client.read(&dst).expect("read"), vec![7; 16]);

        // Destroying the poisoned stream still gives its driver stream back.
        assert_eq!(device.streams.load(Ordering::SeqCst), 2);
        fx.client.destroy_stream(fx.stream).expect("destroy");
        assert_eq!(device.streams.load(Ordering::SeqCst), 1);
        // Gone, not poisoned, by every path: the buffers and the handle keep
        // the stream's slot, whose lock the panic poisoned.
        let gone = fx.launch();
        assert!(matches!(gone, Err(Error::UnknownStream(_))), "{gone:?}");
        let gone = graph.replay();
        assert!(matches!(gone, Err(Error::UnknownGraph(_))), "{gone:?}");
        let gone = fx.client.sync(fx.stream);
        assert!(matches!(gone, Err(Error::UnknownStream(_))), "{gone:?}");
    }

    #[test]
    fn a_launch_finds_its_stream_through_its_buffers_of_this_client_only() {
        // Two clients number their streams alike: the second client's
        // buffer names stream 1 too, and must not lead there.
        let (ours, theirs) = (Copying::new(), Copying::new());
        assert_eq!(ours.stream, theirs.stream);
        let buffers = [&theirs.src, &theirs.dst];
        let refused = ours
            .client
            .launch(ours.stream, &ours.kernel, [1, 1, 1], &buffers, &[], &[]);
        assert!(matches!(refused, Err(Error::OtherClient(_))), "{refused:?}");
        assert_eq!(theirs.client.read(&theirs.dst).expect("read"), vec![0; 16]);
        ours.launch().expect("its own buffers");
        assert_eq!(ours.client.read(&ours.dst).expect("read"), vec![5; 16]);
    }

    #[test]
    fn a_launch_may_bind_the_most_a_kernel_may_and_no_more() {
        use crate::kernels::signature::MAX_BINDINGS;
        let client = client();
        let stream = client.create_stream().expect("stream");
        let src = client.create(stream, &[5; 16]).expect("src");
        let dst = client.create(stream, &[0; 16]).expect("dst");
        let mut buffers = vec![&src, &dst];
        buffers.resize(MAX_BINDINGS, &src);
        let kernel = copy_kernel(MAX_BINDINGS);
        let launch = |buffers: &[&crate::Buffer], info: &[u8]| {
            client.launch(stream, &kernel, [1, 1, 1], buffers, info, &[])
        };
        launch(&buffers, &[]).expect("the most bindings a kernel may have");
        assert_eq!(client.read(&dst).expect("read"), vec![5; 16]);
        // As many with info bytes the kernel does not read: refused for
        // those, the count being fine.
        let err = launch(&buffers, &[0; 4]).expect_err("info bytes the kernel does not read");
        assert!(
            matches!(&err, Error::KernelMismatch { reason, .. } if reason.contains("info bytes")),
            "{err}"
        );
        buffers.push(&src);
        let err = launch(&buffers, &[]).expect_err("one binding too many");
        assert!(
            matches!(&err, Error::KernelMismatch { reason, .. } if reason.contains("at most")),
            "{err}"
        );
    }

    #[test]
    fn a_launch_binds_any_stream_of_its_client_and_no_other_client() {
        let fx = Copying::new();
        let (client, stream, src) = (&fx.client, fx.stream, &fx.src);
        let other = client.create_stream().expect("other stream");
        let foreign = client.create(other, &[0; 16]).expect("foreign");
        client
            .launch(stream, &fx.kernel, [1, 1, 1], &[src, &foreign], &[], &[])
            .expect("another stream's buffer, written on this one");
        assert_eq!(client.read(&foreign).expect("read"), vec![5; 16]);
        // All of them another stream's, and the first of them: the launch
        // runs on the stream it names.
        let also_foreign = client.create(other, &[0; 16]).expect("also foreign");
        client
            .launch(
                stream,
                &fx.kernel,
                [1, 1, 1],
                &[&foreign, &also_foreign],
                &[],
                &[],
            )
            .expect("another stream's buffers");
        assert_eq!(client.read(&also_foreign).expect("read"), vec![5; 16]);
        let stranger =
            Client::<TestDriver>::with_device(std::sync::Arc::default(), Config::default());
        let theirs = stranger.create_stream().expect("their stream");
        let theirs = stranger.create(theirs, &[0; 16]).expect("their buffer");
        let err = client
            .launch(stream, &fx.kernel, [1, 1, 1], &[src, &theirs], &[], &[])
            .expect_err("another client's buffer");
        assert!(matches!(err, Error::OtherClient(_)), "{err}");
        assert_eq!(
            client.read(&fx.dst).expect("read"),
            vec![0; 16],
            "nothing ran"
        );
        fx.launch().expect("its own buffers");
        assert_eq!(client.read(&fx.dst).expect("read"), vec![5; 16]);
    }

    #[test]
    fn recorded_launches_are_logged_and_eager_ones_are_not() {
        let fx = Copying::new();
        let (client, stream) = (&fx.client, fx.stream);
        let window = client.prepare(stream).expect("prepare");
        fx.launch().expect("warmup launch");
        client.begin(stream, window).expect("begin");
        for _ in 0..2 {
            fx.launch().expect("recorded launch");
        }
        let graph = client.instantiate(stream, window).expect("graph");
        let info = client.graph_info(&graph).expect("info");
        assert_eq!(info.launches, 2, "the recorded two, not the warmup's");
        assert_eq!(info.touched_bytes, 32);
        assert_eq!(info.device_bytes, 512, "two slices of one alignment each");
    }

    #[test]
    fn a_recorded_write_keeps_its_staged_bytes() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let dst = client.create(stream, &[0; 32]).expect("dst");
        let window = client.prepare(stream).expect("prepare");
        client.write(&dst, &[9; 32]).expect("warmup write");
        client.begin(stream, window).expect("begin");
        client.write(&dst, &[9; 32]).expect("recorded write");
        let graph = client.instantiate(stream, window).expect("graph");
        let info = client.graph_info(&graph).expect("info");
        assert_eq!((info.copies, info.launches), (1, 0));
        assert!(
            info.host_bytes >= 32,
            "the staged bytes are pinned: {info:?}"
        );
        assert!(info.uploaded, "the test driver's upload succeeds");
        assert!(info.instantiate_time > std::time::Duration::ZERO);
        // Later writes stage through the pool too, once the drop queue is
        // empty from the first free range on; none may take the graph's
        // staging slice.
        client.sync(stream).expect("sync");
        for fill in 1..4 {
            client.write(&dst, &[fill; 32]).expect("eager write");
        }
        client.replay(&graph).expect("replay");
        assert_eq!(client.read(&dst).expect("read"), vec![9; 32]);
    }

    #[test]
    fn a_panicking_recapture_leaves_the_graph_as_it_was() {
        let fx = Copying::new();
        let (client, stream, dst) = (&fx.client, fx.stream, &fx.dst);
        let (graph, ()) = client.capture(stream, |_| fx.launch()).expect("capture");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = client.recapture(&graph, |pass| -> Result<(), Error> {
                if pass == Pass::Record {
                    panic!("the body fails mid-recording");
                }
                Ok(())
            });
        }));
        assert!(result.is_err());
        assert_eq!(client.phase(stream).expect("phase"), Phase::None);
        client.write(dst, &[0; 16]).expect("reset");
        client.replay(&graph).expect("the old graph replays");
        assert_eq!(client.read(dst).expect("read"), vec![5; 16]);
        assert_eq!(client.graph_info(&graph).expect("info").launches, 1);
    }

    #[test]
    fn trim_releases_every_empty_page_and_counts_them() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        // A device page for the buffer, a host page for its staging.
        let buffer = client.create(stream, &[1; 64]).expect("buffer");
        drop(buffer);
        assert_eq!(client.trim(stream).expect("trim"), 2);
        assert_eq!(client.usage(stream).expect("usage").device.pages, 0);
        assert_eq!(client.trim(stream).expect("again"), 0);
    }

    #[test]
    fn a_handle_replaying_while_its_stream_is_destroyed_ends_unknown() {
        let (fx, graph) = Copying::with_graph();
        let replays = race_the_destroy(
            &fx,
            || graph.replay(),
            |err| matches!(err, Error::UnknownGraph(_)),
        );
        assert!(replays.is_ok(), "{replays:?}");
        assert!(!fx.client.is_live(&graph), "the graph went with its stream");
    }

    #[test]
    fn a_destroyed_graphs_handle_never_replays_the_graph_in_its_place() {
        // A handle finds its graph at the place the stream held it, and a
        // place is reused: the next graph lands where the destroyed one was.
        let (fx, old) = Copying::with_graph();
        fx.client.destroy(&old).expect("destroy");
        let fill = fx.client.create(fx.stream, &[0; 16]).expect("fill");
        let (new, ()) = fx
            .client
            .capture(fx.stream, |_| {
                let buffers = [&fx.src, &fill];
                fx.client
                    .launch(fx.stream, &fx.kernel, [1, 1, 1], &buffers, &[], &[])
            })
            .expect("capture");
        fx.client
            .write(&fill, &[0; 16])
            .expect("undo the warmup's copy");
        for replay in [old.replay(), fx.client.replay(&old)] {
            assert!(
                matches!(replay, Err(Error::UnknownGraph(id)) if id == old.id()),
                "{replay:?}"
            );
        }
        assert_eq!(fx.client.read(&fill).expect("read"), vec![0; 16], "not run");
        new.replay().expect("the new graph replays");
        assert_eq!(fx.client.read(&fill).expect("read"), vec![5; 16]);
    }

    #[test]
    fn a_handle_replaying_while_its_place_is_refilled_never_finds_the_newcomer() {
        // The deterministic case above, raced: one thread replays through
        // the handle while this one destroys its graph and captures graph
        // after graph into the place it left. From the first time it is told
        // its graph is gone, it never replays again, whichever graph lies
        // there.
        let (fx, old) = Copying::with_graph();
        let started = AtomicBool::new(false);
        let finished = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let replayer = scope.spawn(|| {
                let mut gone = false;
                loop {
                    started.store(true, Ordering::SeqCst);
                    let last = finished.load(Ordering::SeqCst);
                    match old.replay() {
                        Ok(()) if gone => return Err("replayed after its graph went".to_owned()),
                        Ok(()) => {}
                        Err(Error::UnknownGraph(id)) if id == old.id() => gone = true,
                        // Refused while this thread's capture records: the
                        // graph is not looked for then.
                        Err(Error::NotRecorder { .. }) => {}
                        Err(other) => return Err(other.to_string()),
                    }
                    if last {
                        return Ok(gone);
                    }
                }
            });
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            fx.client.destroy(&old).expect("destroy");
            for _ in 0..32 {
                let (new, ()) = fx
                    .client
                    .capture(fx.stream, |_| fx.launch())
                    .expect("capture into the place left");
                for _ in 0..16 {
                    std::thread::yield_now();
                }
                fx.client.destroy(&new).expect("destroy the newcomer");
            }
            finished.store(true, Ordering::SeqCst);
            let gone = replayer
                .join()
                .expect("the replaying thread does not panic");
            assert_eq!(gone, Ok(true));
        });
    }

    #[test]
    fn a_panicking_capture_body_closes_its_window() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = client.capture(stream, |pass| -> Result<(), Error> {
                if pass == Pass::Record {
                    panic!("the body fails mid-recording");
                }
                Ok(())
            });
        }));
        assert!(result.is_err());
        assert_eq!(client.phase(stream).expect("phase"), Phase::None);
        let window = client.prepare(stream).expect("a new window opens");
        client.begin(stream, window).expect("begin");
        client.instantiate(stream, window).expect("graph");
    }

    #[test]
    fn a_length_too_large_to_align_is_too_large() {
        let client = client_with(Config {
            max_allocation_bytes: u64::MAX,
            ..Config::default()
        });
        let stream = client.create_stream().expect("stream");
        let err = client.allocate(stream, u64::MAX - 10).expect_err("refused");
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
        let buffer = client
            .create(stream, &[1; 6])
            .expect("a small one still works");
        let err = client
            .read_f32(&buffer)
            .expect_err("6 bytes are not whole f32s");
        assert!(
            matches!(
                err,
                Error::NotWhole {
                    bytes: 6,
                    element: 4,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn streams_are_released_with_the_client() {
        let client = client();
        let device = client.device().clone();
        let stream = client.create_stream().expect("stream");
        let buffer = client.create(stream, &[1; 8]).expect("buffer");
        assert!(device.pages.load(Ordering::SeqCst) > 0);
        drop(client);
        assert_eq!(
            device.pages.load(Ordering::SeqCst),
            0,
            "every page released"
        );
        drop(buffer);
    }

    #[test]
    fn a_view_reads_and_writes_its_bytes_alone() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let bytes: Vec<u8> = (0..1024u32).map(|i| (i * 7 % 251) as u8).collect();
        let buffer = client.create(stream, &bytes).expect("buffer");
        let view = buffer.range(256, 512).expect("a view");
        assert_eq!((view.len(), view.span().offset), (512, 256));
        assert!(view.is_view() && !buffer.is_view());
        assert_eq!(view.id(), buffer.id(), "one allocation");
        assert_eq!(view.placement(), buffer.placement());
        assert_eq!(client.read(&view).expect("read"), bytes[256..768]);
        // A view of a view counts from its own start.
        let inner = view.range(256, 4).expect("a view of the view");
        assert_eq!(inner.span().offset, 512);
        client.write(&inner, &[9; 4]).expect("write four bytes");
        let mut want = bytes.clone();
        want[512..516].copy_from_slice(&[9; 4]);
        assert_eq!(client.read(&buffer).expect("read all"), want);
        let wrong = client.write(&view, &[0; 1024]);
        assert!(
            matches!(
                wrong,
                Err(Error::SizeMismatch {
                    expected: 512,
                    got: 1024,
                    ..
                })
            ),
            "{wrong:?}"
        );
        assert!(format!("{inner:?}").contains("[512..516)"), "{inner:?}");
        // The view keeps the allocation as a clone would.
        drop(buffer);
        assert_eq!(client.read(&view).expect("read").len(), 512);
    }

    #[test]
    fn a_view_outside_its_buffer_or_off_the_alignment_is_refused() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let buffer = client.allocate(stream, 1000).expect("buffer");
        for (offset, len, reason) in [
            (0, 0, "at least one byte"),
            (768, 233, "past the buffer's end"),
            (1024, 1, "past the buffer's end"),
            (u64::MAX - 255, 512, "past the buffer's end"),
            (128, 64, "multiple of SLICE_ALIGN"),
        ] {
            let err = buffer.range(offset, len).expect_err("refused");
            assert!(
                matches!(err, Error::BadRange { size: 1000, .. })
                    && err.to_string().contains(reason),
                "{offset}+{len}: {err}"
            );
        }
        let last = buffer.range(768, 232).expect("up to the last byte");
        assert_eq!(last.len(), 232);
        let err = last.range(0, 233).expect_err("past the view's end");
        assert!(matches!(err, Error::BadRange { size: 232, .. }), "{err}");
    }

    #[test]
    fn disjoint_views_bind_beside_a_written_one_and_overlapping_ones_do_not() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let buffer = client.create(stream, &[1; 768]).expect("buffer");
        let (a, b) = (
            buffer.range(0, 256).expect("a"),
            buffer.range(256, 512).expect("b"),
        );
        let copy = copy_kernel(2);
        client.write(&a, &[5; 256]).expect("write a");
        client
            .launch(stream, &copy, [1, 1, 1], &[&a, &b], &[], &[])
            .expect("disjoint views of one buffer");
        assert_eq!(client.read(&b).expect("read")[..256], [5; 256]);
        let overlap = buffer.range(0, 512).expect("overlapping b");
        let err = client
            .launch(stream, &copy, [1, 1, 1], &[&overlap, &b], &[], &[])
            .expect_err("a written view overlapping a bound one");
        assert!(err.to_string().contains("bytes they share"), "{err}");
    }

    #[test]
    fn temporaries_are_shared_only_when_the_config_says_so() {
        for share in [true, false] {
            let client = client_with(Config {
                share_temporaries: share,
                ..Config::default()
            });
            let stream = client.create_stream().expect("stream");
            let fill = kernel("fill", &[Access::Read, Access::Write]);
            let src = client.create(stream, &[1; 64]).expect("src");
            let (graph, ()) = client
                .capture(stream, |_| {
                    let scratch = client.allocate(stream, 64)?;
                    client.launch(stream, &fill, [1, 1, 1], &[&src, &scratch], &[], &[])
                })
                .expect("capture");
            let info = client.graph_info(&graph).expect("info");
            let arena = client.usage(stream).expect("usage").temporary_arena_bytes;
            let want = if share { 256 } else { 0 };
            assert_eq!(
                (info.temporary_bytes, arena),
                (want, want),
                "sharing {share}"
            );
        }
    }

    #[test]
    fn the_driver_is_handed_the_dependencies_unless_the_config_keeps_a_chain() {
        for order in [
            crate::streams::state::ReplayOrder::Dependencies,
            crate::streams::state::ReplayOrder::Chain,
        ] {
            let client = client_with(Config {
                replay_order: order,
                ..Config::default()
            });
            let stream = client.create_stream().expect("stream");
            let copy = copy_kernel(2);
            let (a, b, c) = (
                client.create(stream, &[1; 16]).expect("a"),
                client.create(stream, &[0; 16]).expect("b"),
                client.create(stream, &[0; 16]).expect("c"),
            );
            let step = || {
                client.launch(stream, &copy, [1, 1, 1], &[&a, &b], &[], &[])?;
                client.launch(stream, &copy, [1, 1, 1], &[&a, &c], &[], &[])?;
                client.launch(stream, &copy, [1, 1, 1], &[&b, &c], &[], &[])
            };
            let (graph, ()) = client.capture(stream, |_| step()).expect("capture");
            client.recapture(&graph, |_| step()).expect("recapture");
            let orders = client.device().orders.lock().expect("orders").clone();
            let want = match order {
                crate::streams::state::ReplayOrder::Dependencies => Some(vec![(0, 2), (1, 2)]),
                crate::streams::state::ReplayOrder::Chain => None,
            };
            assert_eq!(orders, [want.clone(), want], "{order:?}");
        }
    }

    #[test]
    fn a_refused_upload_is_counted_and_the_graph_replays() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        client.device().refuse_upload.store(true, Ordering::SeqCst);
        let (graph, ()) = client.capture(stream, |_| Ok(())).expect("capture");
        assert!(!client.graph_info(&graph).expect("info").uploaded);
        client.device().refuse_upload.store(false, Ordering::SeqCst);
        let (second, ()) = client.capture(stream, |_| Ok(())).expect("capture");
        assert!(client.graph_info(&second).expect("info").uploaded);
        assert_eq!(client.usage(stream).expect("usage").upload_failures, 1);
        client.replay(&graph).expect("replays all the same");
    }

    #[test]
    fn a_recorded_run_that_needs_a_page_is_refused() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let kept = std::cell::RefCell::new(Vec::new());
        let refused = client.capture(stream, |pass| {
            // Kept, so not a temporary: the recorded run's allocation finds
            // the warmup's still held and needs a page of its own.
            let buffer = client.allocate(stream, 4 << 20)?;
            client.write(&buffer, &vec![1; 4 << 20])?;
            if pass == Pass::Warmup {
                kept.borrow_mut().push(buffer);
            }
            Ok(())
        });
        match refused {
            Err(Error::Doomed(cause)) => assert!(
                matches!(*cause, Error::AllocationWhileRecording(s) if s == stream),
                "{cause}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn handles_say_what_they_are_and_a_dropped_graph_handle_destroys_its_graph() {
        let client = client();
        assert_eq!(Client::<TestDriver>::devices().expect("devices").len(), 1);
        let stream = client.create_stream().expect("stream");
        let kernel = kernel("named", &[Access::Write]);
        assert!(format!("{kernel:?}").contains("named"), "{kernel:?}");
        let buffer = client.create_f32(stream, &[1.5, 2.5]).expect("buffer");
        assert!(!buffer.is_empty());
        client.write_f32(&buffer, &[3.0, 4.0]).expect("write");
        assert_eq!(client.read_f32(&buffer).expect("read"), [3.0, 4.0]);
        let (graph, ()) = client.capture(stream, |_| Ok(())).expect("capture");
        let text = format!("{graph:?}");
        assert!(
            text.contains(&graph.id().to_string()) && text.contains(&stream.to_string()),
            "{text}"
        );
        assert_eq!(client.live_graphs(), 1);
        drop(graph);
        client.sync(stream).expect("sync");
        assert_eq!(client.live_graphs(), 0, "destroyed with its last handle");
    }

    #[test]
    fn placements_overlap_only_on_a_shared_byte_of_one_page_of_one_stream() {
        use crate::client::Placement;
        use crate::ids::StreamId;
        let at = |stream, page, offset, span| Placement {
            stream: StreamId(stream),
            page,
            offset,
            span,
        };
        let a = at(1, 2, 256, 256);
        assert!(a.overlaps(&a));
        assert!(a.overlaps(&at(1, 2, 511, 256)), "its last byte");
        assert!(a.overlaps(&at(1, 2, 0, 257)), "its first byte");
        assert!(a.overlaps(&at(1, 2, 300, 8)), "inside it");
        assert!(!a.overlaps(&at(1, 2, 512, 256)), "just after");
        assert!(!a.overlaps(&at(1, 2, 0, 256)), "just before");
        assert!(!a.overlaps(&at(1, 3, 256, 256)), "another page");
        assert!(!a.overlaps(&at(2, 2, 256, 256)), "another stream");
    }

    #[test]
    fn what_the_body_returns_is_no_temporary() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let (graph, out) = client
            .capture(stream, |_| {
                let out = client.allocate(stream, 64)?;
                client.write(&out, &[2; 64])?;
                Ok(out)
            })
            .expect("capture");
        assert_eq!(client.graph_info(&graph).expect("info").temporary_bytes, 0);
        assert_eq!(
            client.usage(stream).expect("usage").temporary_arena_bytes,
            0
        );
        assert_eq!(out.len(), 64);
    }

    #[test]
    fn updates_are_counted_in_place_or_anew() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let a = client.create(stream, &[1; 16]).expect("a");
        let copy = copy_kernel(2);
        let b = client.create(stream, &[0; 16]).expect("b");
        let step = |launches: usize| {
            (0..launches)
                .try_for_each(|_| client.launch(stream, &copy, [1, 1, 1], &[&a, &b], &[], &[]))
        };
        let (graph, ()) = client.capture(stream, |_| step(1)).expect("capture");
        client.recapture(&graph, |_| step(1)).expect("in place");
        client.recapture(&graph, |_| step(2)).expect("anew");
        client.recapture(&graph, |_| step(3)).expect("anew");
        let info = client.graph_info(&graph).expect("info");
        assert_eq!((info.updates_in_place, info.reinstantiations), (1, 2));
    }

    #[test]
    fn a_failed_body_in_a_doomed_window_reports_what_doomed_it() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let kernel = kernel("one", &[Access::Write]);
        let failed = client.capture(stream, |pass| {
            if pass == Pass::Record {
                // Two buffers for a kernel of one binding: refused, and
                // the window doomed.
                let x = client.allocate(stream, 16)?;
                drop(client.launch(stream, &kernel, [1, 1, 1], &[&x, &x], &[], &[]));
                return Err(Error::EmptyBuffer);
            }
            client.allocate(stream, 16).map(drop)
        });
        match failed {
            Err(Error::Doomed(cause)) => {
                assert!(matches!(*cause, Error::KernelMismatch { .. }), "{cause}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refused_begin_gives_back_the_arena_it_took() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let pages = client.usage(stream).expect("usage").device.pages;
        client.device().refuse_begin.store(true, Ordering::SeqCst);
        let refused = client.capture(stream, |_| {
            let scratch = client.allocate(stream, 1 << 20)?;
            client.write(&scratch, &vec![0; 1 << 20])
        });
        assert!(refused.is_err());
        let usage = client.usage(stream).expect("usage");
        assert_eq!(
            (usage.device.pages, usage.temporary_arena_bytes),
            (pages + 1, 0),
            "the warmup's page alone"
        );
    }

    #[test]
    fn only_the_recording_thread_adopts_the_window_it_names() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let window = client.prepare(stream).expect("prepare");
        client.begin(stream, window).expect("begin");
        let wrong = client.adopt(stream, crate::ids::WindowId(window.0 + 1));
        assert!(matches!(wrong, Err(Error::OutOfOrder { .. })), "{wrong:?}");
        client.adopt(stream, window).expect("adopt");
        client.instantiate(stream, window).expect("graph");
    }

    #[test]
    fn a_doomed_window_claims_what_it_would_have_written_until_rewritten() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let copy = copy_kernel(2);
        let (a, b) = (
            client.create(stream, &[1; 16]).expect("a"),
            client.create(stream, &[0; 16]).expect("b"),
        );
        assert_eq!(client.claimed_buffers(), 0);
        let refused = client.capture(stream, |pass| {
            client.launch(stream, &copy, [1, 1, 1], &[&a, &b], &[], &[])?;
            if pass == Pass::Record {
                // One buffer for a kernel of two: refused, the window doomed.
                drop(client.launch(stream, &copy, [1, 1, 1], &[&a], &[], &[]));
            }
            Ok(())
        });
        assert!(matches!(refused, Err(Error::Doomed(_))), "{refused:?}");
        assert_eq!(client.claimed_buffers(), 1, "b");
        assert!(matches!(client.read(&b), Err(Error::Claimed { .. })));
        client.write(&b, &[2; 16]).expect("rewrite");
        assert_eq!(client.claimed_buffers(), 0);
    }

    #[cfg(feature = "raw")]
    #[test]
    fn the_raw_driver_is_reached_under_the_streams_lock() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let buffers = [
            client.create(stream, &[1; 16]).expect("a"),
            client.create(stream, &[2; 300]).expect("b"),
        ];
        let (graph, ()) = client.capture(stream, |_| Ok(())).expect("capture");
        let ops = client
            .with_raw_graph(&graph, |exec, _| exec.len() + 1)
            .expect("the graph");
        assert_eq!(ops, 1, "an empty recording");
        let lens = client
            .with_raw_stream(stream, &[&buffers[0], &buffers[1]], |_, slices| {
                slices.iter().map(|s| s.len).collect::<Vec<_>>()
            })
            .expect("the stream");
        assert_eq!(lens, [16, 300]);
    }

    #[test]
    fn frees_go_back_once_the_device_is_past_them_without_a_sync() {
        let client = client_with(Config {
            drop_queue_threshold: 8,
            ..Config::default()
        });
        let stream = client.create_stream().expect("stream");
        // Each write queues its staging slice; past the threshold the queue
        // is reclaimed on the way, the test driver's work being done.
        let buffer = client.allocate(stream, 16).expect("buffer");
        for _ in 0..40 {
            client.write(&buffer, &[1; 16]).expect("write");
        }
        let pending = client.usage(stream).expect("usage").pending_drops;
        assert!(pending <= 8, "{pending} frees wait");
        let many: Vec<_> = (0..40)
            .map(|_| client.allocate(stream, 16).expect("buffer"))
            .collect();
        drop(many);
        client.sync(stream).expect("nothing waits");
        let many: Vec<_> = (0..40)
            .map(|_| client.allocate(stream, 16).expect("buffer"))
            .collect();
        client.write(&many[0], &[3; 16]).expect("work after them");
        drop(many);
        // The next call collects the forty and, past the threshold,
        // reclaims them: no allocation asks for room here.
        let pending = client.usage(stream).expect("usage").pending_drops;
        assert!(pending <= 8, "{pending} dropped buffers wait");
        // What a window's run freed goes back when it closes.
        let (_graph, ()) = client
            .capture(stream, |_| {
                for _ in 0..4 {
                    drop(client.create(stream, &[2; 16])?);
                }
                Ok(())
            })
            .expect("capture");
        let usage = client.usage(stream).expect("usage");
        assert_eq!(usage.pending_drops, 0, "reclaimed after the window");
    }

    #[test]
    fn a_destroyed_streams_page_another_streams_graph_uses_goes_with_the_graph() {
        let client = client();
        let device = client.device().clone();
        let pages = || device.pages.load(Ordering::SeqCst);
        let [a, b] = streams(&client);
        let copy = copy_kernel(2);
        let x = client.create(a, &[4; 64]).expect("x on a");
        let y = client.create(b, &[0; 64]).expect("y on b");
        let (graph, ()) = client
            .capture(b, |_| {
                client.launch(b, &copy, [1, 1, 1], &[&x, &y], &[], &[])
            })
            .expect("b's graph reads x");
        drop(x);
        let with_a = pages();
        client.destroy_stream(a).expect("destroy a");
        let kept = pages();
        assert!(kept > 0 && kept < with_a, "a's unused pages go, x's stays");
        client.replay(&graph).expect("b's graph still reads x");
        assert_eq!(client.read(&y).expect("read"), vec![4; 64]);
        drop(graph);
        client.sync(b).expect("the graph is destroyed");
        let c = client.create_stream().expect("c");
        client.destroy_stream(c).expect("destroying c sweeps a");
        assert!(pages() < kept, "x's page went with the graph");
        assert_eq!(
            device.streams.load(Ordering::SeqCst),
            1,
            "a's stream is gone too"
        );
    }

    #[test]
    fn a_page_taken_only_to_keep_room_for_info_goes_back_after_the_window() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let kernel = info_kernel("info");
        let out = client.allocate(stream, 16).expect("out");
        let pages = || {
            let usage = client.usage(stream).expect("usage");
            (usage.device.pages, usage.host.pages)
        };
        let before = pages();
        let (_graph, ()) = client
            .capture(stream, |_| {
                client.launch(stream, &kernel, [1, 1, 1], &[&out], &[7; 4], &[])
            })
            .expect("capture");
        // The warmup's new info entry took a device page and its staging a
        // host page; the room kept for the recording took one more of each,
        // unused, and gave them back.
        assert_eq!(pages(), (before.0 + 1, before.1 + 1));
    }

    /// On device pages of one slice each, a capture whose warmup passes
    /// `warmup`'s info contents and whose recording passes two it never
    /// did: room is kept for as many entries as the warmup used.
    fn record_new_info(warmup: [u8; 2]) -> Result<(), Error> {
        let client = client_with(Config {
            device_page_bytes: 256,
            first_page_bytes: 256,
            ..Config::default()
        });
        let stream = client.create_stream().expect("stream");
        let kernel = info_kernel("first_seen");
        let out = client.allocate(stream, 16).expect("out");
        // The host pool keeps room to spare.
        let big = client.allocate(stream, 1 << 20).expect("big");
        client
            .write(&big, &vec![0; 1 << 20])
            .expect("stage through the host pool");
        client
            .launch(stream, &kernel, [1, 1, 1], &[&out], &[1; 4], &[])
            .expect("warm the entry");
        client
            .capture(stream, |pass| {
                for (old, new) in warmup.into_iter().zip([2, 3]) {
                    let info = if pass == Pass::Warmup { old } else { new };
                    client.launch(stream, &kernel, [1, 1, 1], &[&out], &[info; 4], &[])?;
                }
                Ok(())
            })
            .map(drop)
    }

    #[test]
    fn info_first_seen_while_recording_that_needs_a_page_names_the_launch() {
        // The warmup passes one entry twice: the room kept for one, the
        // second new one needs a page.
        match record_new_info([1, 1]) {
            Err(Error::Doomed(cause)) => assert!(
                matches!(&*cause, Error::InfoFirstSeenWhileRecording { kernel, .. } if kernel == "first_seen"),
                "{cause}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn info_first_seen_while_recording_fits_the_room_the_warmup_sized() {
        record_new_info([1, 4]).expect("two entries warmed, two kept room for");
    }

    #[test]
    fn the_allocation_limit_is_inclusive_and_never_past_what_aligns() {
        let limited = |max_allocation_bytes| {
            let client = client_with(Config {
                max_allocation_bytes,
                ..Config::default()
            });
            let stream = client.create_stream().expect("stream");
            (client, stream)
        };
        let (client, stream) = limited(1024);
        assert_eq!(
            client.allocate(stream, 1024).expect("at the limit").len(),
            1024
        );
        let err = client.allocate(stream, 1025).expect_err("past it");
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    requested: 1025,
                    limit: 1024
                }
            ),
            "{err}"
        );
        // Lifted to the top: the largest length that still aligns.
        let (client, stream) = limited(u64::MAX);
        let err = client.allocate(stream, u64::MAX).expect_err("cannot align");
        let limit = u64::MAX - (crate::memory::pool::SLICE_ALIGN - 1);
        assert!(
            matches!(err, Error::TooLarge { limit: l, .. } if l == limit),
            "{err}"
        );
    }

    #[test]
    fn a_failed_warmup_leaves_nothing_the_next_window_predicts_from() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let fill = kernel("fill", &[Access::Write]);
        let failed = client.capture(stream, |_| {
            drop(client.allocate(stream, 64)?);
            Err::<(), _>(Error::EmptyBuffer)
        });
        assert!(failed.is_err());
        let (graph, kept) = client
            .capture(stream, |_| {
                let kept = client.allocate(stream, 64)?;
                let scratch = client.allocate(stream, 512)?;
                client.launch(stream, &fill, [1, 1, 1], &[&scratch], &[], &[])?;
                Ok(kept)
            })
            .expect("capture");
        assert_eq!(
            client.graph_info(&graph).expect("info").temporary_bytes,
            512
        );
        assert_eq!(
            client.usage(stream).expect("usage").temporary_arena_bytes,
            512
        );
        drop(kept);
    }

    #[test]
    fn a_temporary_dropped_on_another_thread_is_still_a_temporary() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let fill = kernel("fill", &[Access::Write]);
        let body = |_| {
            let scratch = client.allocate(stream, 512)?;
            client.launch(stream, &fill, [1, 1, 1], &[&scratch], &[], &[])?;
            // Dropped elsewhere, before the window closes.
            std::thread::spawn(move || drop(scratch))
                .join()
                .map_err(|_| Error::Poisoned)
        };
        let (first, ()) = client.capture(stream, body).expect("capture");
        let (second, ()) = client.capture(stream, body).expect("capture");
        for graph in [&first, &second] {
            assert_eq!(client.graph_info(graph).expect("info").temporary_bytes, 512);
        }
        assert_eq!(
            client.usage(stream).expect("usage").temporary_arena_bytes,
            512,
            "one arena, not retired: nothing was kept"
        );
    }

    #[test]
    fn a_recorded_run_that_panics_holding_a_temporary_leaves_no_arena() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let before = client.usage(stream).expect("usage").device.in_use_bytes;
        let fill = kernel("fill", &[Access::Write]);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            client.capture(stream, |pass| {
                let scratch = client.allocate(stream, 512)?;
                client.launch(stream, &fill, [1, 1, 1], &[&scratch], &[], &[])?;
                assert!(pass == Pass::Warmup, "the recorded run panics");
                Ok(())
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(client.phase(stream).expect("phase"), Phase::None);
        client.sync(stream).expect("sync");
        let usage = client.usage(stream).expect("usage");
        assert_eq!(usage.temporary_arena_bytes, 512, "kept for the next window");
        assert_eq!(usage.device.in_use_bytes, before + 512);
        client.trim(stream).expect("trim");
        let usage = client.usage(stream).expect("usage");
        assert_eq!(usage.temporary_arena_bytes, 0, "no graph holds it");
        assert_eq!(usage.device.in_use_bytes, before);
        let (graph, ()) = client
            .capture(stream, |_| {
                let scratch = client.allocate(stream, 512)?;
                client.launch(stream, &fill, [1, 1, 1], &[&scratch], &[], &[])
            })
            .expect("the next capture");
        assert_eq!(
            client.graph_info(&graph).expect("info").temporary_bytes,
            512
        );
    }

    #[test]
    fn what_an_update_replaces_stays_until_the_device_is_past_it() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let src = client.create(stream, &[7; 32]).expect("src");
        let dst = client.create(stream, &[0; 32]).expect("dst");
        let (first, second) = (copy_kernel(2), copy_kernel(3));
        let held =
            |kernel: &crate::client::Kernel<TestDriver>| std::sync::Arc::downgrade(&kernel.0);
        let (first_held, second_held) = (held(&first), held(&second));
        let (graph, ()) = client
            .capture(stream, |_| {
                client.launch(stream, &first, [1, 1, 1], &[&src, &dst], &[], &[])
            })
            .expect("capture");
        drop(first);
        client.replay(&graph).expect("replay");
        // From here no work counts as done until a sync waits for it.
        client.device().busy.store(true, Ordering::SeqCst);
        client
            .recapture(&graph, |_| {
                let bound = [&src, &dst, &src];
                client.launch(stream, &second, [1, 1, 1], &bound, &[], &[])
            })
            .expect("recapture");
        drop(second);
        assert_eq!(
            first_held.strong_count(),
            1,
            "the replay enqueued before may still launch the old kernel"
        );
        client.sync(stream).expect("sync");
        assert_eq!(first_held.strong_count(), 0, "past the replay");
        assert_eq!(second_held.strong_count(), 1, "the graph holds it");
        client.destroy(&graph).expect("destroy");
        assert_eq!(second_held.strong_count(), 0, "a destroy syncs first");
    }

    #[test]
    fn a_write_whose_stream_joins_a_window_meanwhile_is_refused() {
        let client = client();
        let [a, b] = streams(&client);
        let shared = client.create(b, &[3; 16]).expect("on b");
        let dst = client.create(a, &[0; 16]).expect("on a");
        // Bound on `a`, the buffer of `b` is shared: a write to it is ordered.
        let copy = copy_kernel(2);
        client
            .launch(a, &copy, [1, 1, 1], &[&shared, &dst], &[], &[])
            .expect("shares it");
        // `b` is past that launch: its write waits for nothing of `a`.
        client.wait(b, a).expect("b waits for a");
        let window = client.prepare(a).expect("prepare");
        client.begin(a, window).expect("begin");
        let forking = client.clone();
        interleave::at(Point::WriteOrdered, move || {
            forking.wait(b, a).expect("b joins the window");
        });
        let written = client.write(&shared, &[9; 16]);
        assert!(
            matches!(&written, Err(Error::OutOfOrder { call: "write", reason, .. })
                if reason.contains("meanwhile")),
            "{written:?}"
        );
        client.wait(a, b).expect("b joined back");
        let sealed = client.instantiate(a, window);
        assert!(
            matches!(&sealed, Err(Error::Doomed(cause))
                if matches!(**cause, Error::OutOfOrder { call: "write", .. })),
            "the window misses the joined stream's write: {:?}",
            sealed.map(|graph| graph.id())
        );
        let read = client.read(&shared);
        assert!(read.is_err(), "the write claimed its buffer: {read:?}");
        client.write(&shared, &[5; 16]).expect("rewritten");
        assert_eq!(client.read(&shared).expect("read"), [5; 16]);
    }

    #[test]
    fn a_launch_whose_join_closes_meanwhile_is_refused() {
        let client = client();
        let [a, b] = streams(&client);
        let src = client.create(b, &[4; 16]).expect("src");
        let dst = client.create(b, &[0; 16]).expect("dst");
        let copy = copy_kernel(2);
        let window = client.prepare(a).expect("prepare");
        client.begin(a, window).expect("begin");
        client.wait(b, a).expect("b joins the window");
        let joining = client.clone();
        interleave::at(Point::LaunchJoined, move || {
            joining.wait(a, b).expect("b joined back");
        });
        let launched = client.launch(b, &copy, [1, 1, 1], &[&src, &dst], &[], &[]);
        assert!(
            matches!(&launched, Err(Error::OutOfOrder { call: "launch", reason, .. })
                if reason.contains("has closed")),
            "{launched:?}"
        );
        let sealed = client.instantiate(a, window);
        assert!(
            sealed.is_err(),
            "the window misses the launch: {:?}",
            sealed.map(|graph| graph.id())
        );
        assert_eq!(client.read(&src).expect("src untouched"), [4; 16]);
        let read = client.read(&dst);
        assert!(read.is_err(), "the launch claimed what it writes: {read:?}");
    }

    #[test]
    fn a_destroy_another_destroy_of_its_graph_beat_does_nothing() {
        let (fx, graph) = Copying::with_graph();
        let device = fx.client.device().clone();
        let (beating, beaten) = (fx.client.clone(), graph.clone());
        interleave::at(Point::DestroyFound, move || {
            beating.destroy(&beaten).expect("the other destroy");
        });
        let before = device.fences.load(Ordering::SeqCst);
        // The first destroy finds the graph's stream, the other destroys
        // the graph, then the first finds it gone.
        fx.client.destroy(&graph).expect("destroy");
        let fences = device.fences.load(Ordering::SeqCst) - before;
        assert_eq!(fences, 1, "one sync, the other destroy's");
        assert!(!fx.client.is_live(&graph));
        assert_eq!(fx.client.live_graphs(), 0);
    }

    #[test]
    fn a_stream_joins_one_window_at_a_time_and_none_while_it_has_its_own() {
        let client = client();
        let [a, b, c, d] = streams(&client);
        let (on_a, on_c) = (client.prepare(a).expect("a"), client.prepare(c).expect("c"));
        client.begin(a, on_a).expect("a records");
        client.begin(c, on_c).expect("c records");
        client.wait(b, a).expect("b joins a's window");
        client.wait(b, a).expect("joining again changes nothing");
        let twice = client.wait(b, c);
        assert!(
            matches!(&twice, Err(Error::OutOfOrder { call: "wait", reason, .. })
                if reason.contains("joined to another window")),
            "{twice:?}"
        );
        let own = client.prepare(d).expect("d's own window");
        let busy = client.wait(d, a);
        assert!(
            matches!(&busy, Err(Error::OutOfOrder { call: "wait", reason, .. })
                if reason.contains("of its own")),
            "{busy:?}"
        );
        assert_eq!(client.phase(d).expect("phase"), Phase::Prepared(own));
    }

    #[test]
    fn a_joined_stream_waits_only_for_streams_of_its_window() {
        let client = client();
        let [a, b, c, x] = streams(&client);
        let window = client.prepare(a).expect("prepare");
        client.begin(a, window).expect("begin");
        client.wait(b, a).expect("b joins");
        client.wait(c, a).expect("c joins");
        client
            .wait(b, c)
            .expect("both in one recording, ordered by it");
        let outside = client.wait(b, x);
        assert!(
            matches!(outside, Err(Error::WaitOutsideWindow { stream, other })
                if (stream, other) == (b, x)),
            "{outside:?}"
        );
    }

    #[test]
    fn a_recorded_launch_leaves_the_order_of_shared_buffers_alone() {
        let client = client();
        let [a, b] = streams(&client);
        let src = client.create(a, &[6; 16]).expect("src");
        let shared = client.create(b, &[1; 16]).expect("on b");
        let copy = copy_kernel(2);
        let window = client.prepare(a).expect("prepare");
        client.begin(a, window).expect("begin");
        client
            .launch(a, &copy, [1, 1, 1], &[&src, &shared], &[], &[])
            .expect("recorded");
        // The recorded copy runs when the graph replays: `b` has nothing of
        // `a`'s to wait for yet.
        assert_eq!(client.read(&shared).expect("read"), [1; 16]);
        let graph = client.instantiate(a, window).expect("instantiate");
        client.replay(&graph).expect("replay");
        assert_eq!(client.read(&shared).expect("read"), [6; 16]);
    }

    #[test]
    fn a_stream_to_wait_for_destroyed_meanwhile_is_waited_for_no_more() {
        let client = client();
        let [a, c] = streams(&client);
        let src = client.create(c, &[8; 16]).expect("src");
        let mid = client.create(a, &[0; 16]).expect("mid");
        let dst = client.create(a, &[0; 16]).expect("dst");
        let copy = copy_kernel(2);
        client
            .launch(c, &copy, [1, 1, 1], &[&src, &mid], &[], &[])
            .expect("c writes mid");
        // `a`'s launch must wait for `c`, which its destroy syncs.
        let destroying = client.clone();
        interleave::at(Point::OrderLocking, move || {
            destroying.destroy_stream(c).expect("destroy c");
        });
        client
            .launch(a, &copy, [1, 1, 1], &[&mid, &dst], &[], &[])
            .expect("a's launch goes on");
        assert_eq!(client.read(&dst).expect("read"), [8; 16]);
    }

    #[test]
    fn a_launch_whose_buffers_stream_is_destroyed_meanwhile_is_refused() {
        let client = client();
        let [a, b] = streams(&client);
        let src = client.create(b, &[8; 16]).expect("on b");
        let dst = client.create(a, &[0; 16]).expect("on a");
        let destroying = client.clone();
        interleave::at(Point::OrderLocking, move || {
            destroying.destroy_stream(b).expect("destroy b");
        });
        let copy = copy_kernel(2);
        let launched = client.launch(a, &copy, [1, 1, 1], &[&src, &dst], &[], &[]);
        assert!(
            matches!(launched, Err(Error::UnknownStream(gone)) if gone == b),
            "{launched:?}"
        );
        assert_eq!(client.read(&dst).expect("untouched"), [0; 16]);
    }

    #[test]
    fn only_work_writing_all_of_a_claimed_buffer_clears_its_claim() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let copy = copy_kernel(2);
        let src = client.create(stream, &[1; 512]).expect("src");
        let dst = client.create(stream, &[0; 512]).expect("dst");
        let (src_half, dst_half) = (
            src.range(0, 256).expect("half"),
            dst.range(0, 256).expect("half"),
        );
        // A window doomed by a launch of one binding claims what it writes.
        let claim = || {
            let refused = client.capture(stream, |pass| {
                client.launch(stream, &copy, [1, 1, 1], &[&src, &dst], &[], &[])?;
                if pass == Pass::Record {
                    drop(client.launch(stream, &copy, [1, 1, 1], &[&src], &[], &[]));
                }
                Ok(())
            });
            assert!(matches!(refused, Err(Error::Doomed(_))), "{refused:?}");
            assert_eq!(client.claimed_buffers(), 1, "dst");
        };
        claim();
        let graph_of = |bound: [&crate::Buffer; 2]| {
            let window = client.prepare(stream).expect("prepare");
            client.begin(stream, window).expect("begin");
            client
                .launch(stream, &copy, [1, 1, 1], &bound, &[], &[])
                .expect("recorded");
            client.instantiate(stream, window).expect("instantiate")
        };
        let (half, whole) = (graph_of([&src_half, &dst_half]), graph_of([&src, &dst]));
        client
            .launch(stream, &copy, [1, 1, 1], &[&src_half, &dst_half], &[], &[])
            .expect("half of it, eagerly");
        client.replay(&half).expect("half of it, replayed");
        assert_eq!(
            client.claimed_buffers(),
            1,
            "half of dst is as the failure left it"
        );
        client.replay(&whole).expect("all of it, replayed");
        assert_eq!(client.claimed_buffers(), 0);
        assert_eq!(client.read(&dst).expect("read"), [1; 512]);
        claim();
        client
            .launch(stream, &copy, [1, 1, 1], &[&src, &dst], &[], &[])
            .expect("all of it, eagerly");
        assert_eq!(client.claimed_buffers(), 0);
    }

    #[test]
    fn another_threads_calls_on_a_recording_stream_are_refused_and_leave_its_window_whole() {
        let fx = Copying::new();
        let window = fx.client.prepare(fx.stream).expect("prepare");
        fx.client.begin(fx.stream, window).expect("begin");
        fx.launch().expect("recorded");
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let launched = fx.launch();
                assert!(
                    matches!(launched, Err(Error::NotRecorder { window: named, .. })
                        if named == window),
                    "{launched:?}"
                );
                let read = fx.client.read(&fx.src);
                assert!(
                    matches!(read, Err(Error::SyncWhileRecording(_))),
                    "{read:?}"
                );
            });
        });
        let graph = fx
            .client
            .instantiate(fx.stream, window)
            .expect("the window is whole");
        assert_eq!(fx.client.graph_info(&graph).expect("info").launches, 1);
        fx.client.replay(&graph).expect("replay");
        assert_eq!(fx.client.read(&fx.dst).expect("read"), [5; 16]);
    }

    #[test]
    fn a_replay_on_a_stream_whose_work_is_recorded_is_refused() {
        let (fx, graph) = Copying::with_graph();
        let other = fx.client.create_stream().expect("other");
        // Its own window.
        let window = fx.client.prepare(fx.stream).expect("prepare");
        fx.client.begin(fx.stream, window).expect("begin");
        let replayed = fx.client.replay(&graph);
        assert!(
            matches!(replayed, Err(Error::ReplayWhileRecording(s)) if s == fx.stream),
            "{replayed:?}"
        );
        let sealed = fx.client.instantiate(fx.stream, window);
        assert!(
            matches!(&sealed, Err(Error::Doomed(_))),
            "the window missed the replay: {:?}",
            sealed.map(|graph| graph.id())
        );
        // A window it joined.
        let window = fx.client.prepare(other).expect("prepare");
        fx.client.begin(other, window).expect("begin");
        fx.client.wait(fx.stream, other).expect("joins");
        let replayed = fx.client.replay(&graph);
        assert!(
            matches!(replayed, Err(Error::ReplayWhileRecording(s)) if s == fx.stream),
            "{replayed:?}"
        );
        fx.client.wait(other, fx.stream).expect("joined back");
        drop(fx.client.instantiate(other, window));
        fx.client.replay(&graph).expect("free again");
    }

    #[test]
    fn a_dropped_buffers_graph_stays_ordered_after_its_other_streams_work() {
        let device = std::sync::Arc::new(super::TestDevice::default());
        let client = Client::<TestDriver>::with_device(device.clone(), Config::default());
        let [p, g] = streams(&client);
        let x = client.create(p, &[1; 16]).expect("x");
        let ones = client.create(p, &[2; 16]).expect("ones");
        let out = client.create(g, &[0; 16]).expect("out");
        let copy = copy_kernel(2);
        let (graph, ()) = client
            .capture(g, |_| {
                client.launch(g, &copy, [1, 1, 1], &[&x, &out], &[], &[])
            })
            .expect("capture");
        client
            .launch(p, &copy, [1, 1, 1], &[&ones, &x], &[], &[])
            .expect("p writes x");
        drop(x);
        let waits = device.waits.load(Ordering::SeqCst);
        client.replay(&graph).expect("replay");
        assert_eq!(
            device.waits.load(Ordering::SeqCst),
            waits + 1,
            "the replay waits for p's write of the buffer it reads"
        );
        assert_eq!(client.read(&out).expect("read"), [2; 16]);
        assert_eq!(client.lingering_buffers(), 1);
        // Once the graph is gone nothing can touch the memory: its order
        // and claims go with it.
        drop(graph);
        assert_eq!(client.lingering_buffers(), 1, "p's queued free holds it");
        client.sync(p).expect("sync");
        assert_eq!(client.lingering_buffers(), 0);
    }

    #[test]
    fn a_dropped_buffers_claim_stays_while_a_graph_reads_it() {
        let device = std::sync::Arc::new(super::TestDevice::default());
        let client = Client::<TestDriver>::with_device(device.clone(), Config::default());
        let stream = client.create_stream().expect("stream");
        let src = client.create(stream, &[3; 16]).expect("src");
        let x = client.create(stream, &[0; 16]).expect("x");
        let out = client.create(stream, &[0; 16]).expect("out");
        let copy = copy_kernel(2);
        let capture = |from: &crate::Buffer, to: &crate::Buffer| {
            client
                .capture(stream, |_| {
                    client.launch(stream, &copy, [1, 1, 1], &[from, to], &[], &[])
                })
                .expect("capture")
                .0
        };
        let writes = capture(&src, &x);
        let reads = capture(&x, &out);
        drop(x);
        device.refuse_replay.store(true, Ordering::SeqCst);
        assert!(client.replay(&writes).is_err());
        device.refuse_replay.store(false, Ordering::SeqCst);
        let refused = client.replay(&reads);
        assert!(
            matches!(refused, Err(Error::Claimed { .. })),
            "a replay reading what a failed replay did not write: {refused:?}"
        );
        client.replay(&writes).expect("a good replay renews it");
        client.replay(&reads).expect("and the reader runs");
        assert_eq!(client.read(&out).expect("read"), [3; 16]);
        drop((writes, reads));
        assert_eq!(client.claimed_buffers(), 0);
    }

    #[test]
    fn a_query_changes_nothing_and_capture_destroy_cycles_keep_one_arena() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let x = client.create(stream, &[4; 16]).expect("x");
        let y = client.create(stream, &[0; 16]).expect("y");
        let copy = copy_kernel(2);
        let mut first = None;
        for cycle in 0..10_000 {
            let (graph, ()) = client
                .capture(stream, |_| {
                    let scratch = client.allocate(stream, 512)?;
                    client.launch(stream, &copy, [1, 1, 1], &[&x, &scratch], &[], &[])?;
                    client.launch(stream, &copy, [1, 1, 1], &[&scratch, &y], &[], &[])
                })
                .expect("capture");
            drop(graph);
            let usage = client.usage(stream).expect("usage");
            assert_eq!(usage, client.usage(stream).expect("usage"), "a query");
            let first = *first.get_or_insert(usage);
            assert_eq!(usage.device.pages, first.device.pages, "cycle {cycle}");
            assert_eq!(usage.device.reserved_bytes, first.device.reserved_bytes);
            assert_eq!(usage.temporary_arena_bytes, 512, "the stream keeps it");
        }
        assert_eq!(client.read(&y).expect("read"), [4; 16]);
        client.trim(stream).expect("trim");
        let usage = client.usage(stream).expect("usage");
        assert_eq!(usage.temporary_arena_bytes, 0, "no graph holds it");
    }

    #[test]
    fn a_dropped_buffer_nothing_else_holds_loses_its_claim_and_order_at_once() {
        let device = std::sync::Arc::new(super::TestDevice::default());
        let client = Client::<TestDriver>::with_device(device.clone(), Config::default());
        let [a, b] = streams(&client);
        let src = client.create(a, &[2; 16]).expect("src");
        let x = client.create(a, &[0; 16]).expect("x");
        let out = client.create(b, &[0; 16]).expect("out");
        let copy = copy_kernel(2);
        client
            .launch(b, &copy, [1, 1, 1], &[&x, &out], &[], &[])
            .expect("b reads x: shared");
        let (writes, ()) = client
            .capture(a, |_| {
                client.launch(a, &copy, [1, 1, 1], &[&src, &x], &[], &[])
            })
            .expect("capture");
        device.refuse_replay.store(true, Ordering::SeqCst);
        assert!(client.replay(&writes).is_err(), "claims x");
        device.refuse_replay.store(false, Ordering::SeqCst);
        drop(writes);
        client.sync(b).expect("b is past its read of x");
        assert_eq!(client.claimed_buffers(), 1);
        let server = client.server().expect("server");
        let ordered = server.ordered_buffers();
        drop(x);
        client.sync(a).expect("a call on a collects x");
        assert_eq!(client.lingering_buffers(), 0, "nothing else held x");
        assert_eq!(client.claimed_buffers(), 0, "x's claim went with it");
        assert_eq!(server.ordered_buffers(), ordered - 1, "and its order");
    }

    #[test]
    fn a_destroyed_stream_that_shared_lets_go_of_its_arena() {
        let client = client();
        let device = client.device().clone();
        let pages = || device.pages.load(Ordering::SeqCst);
        let [a, b] = streams(&client);
        let copy = copy_kernel(2);
        let x = client.create(a, &[4; 16]).expect("x on a");
        let y = client.create(b, &[0; 16]).expect("y on b");
        client
            .launch(b, &copy, [1, 1, 1], &[&x, &y], &[], &[])
            .expect("a's buffer used on b: a shares");
        let (graph, ()) = client
            .capture(a, |_| {
                let scratch = client.allocate(a, 512)?;
                client.launch(a, &copy, [1, 1, 1], &[&x, &scratch], &[], &[])?;
                client.launch(a, &copy, [1, 1, 1], &[&scratch, &x], &[], &[])
            })
            .expect("a graph with a temporary");
        drop(graph);
        assert!(client.usage(a).expect("usage").temporary_arena_bytes > 0);
        drop(x);
        client.sync(b).expect("b is past x");
        let before = pages();
        client.destroy_stream(a).expect("destroy a");
        assert_eq!(
            device.streams.load(Ordering::SeqCst),
            1,
            "a's stream went: nothing kept its pages"
        );
        assert!(pages() < before, "a's pages, the arena's too, went");
    }

    #[test]
    fn buffers_dropped_on_other_threads_while_their_graphs_go_leave_nothing_kept() {
        let client = client();
        let [a, b] = streams(&client);
        let copy = copy_kernel(2);
        let server = client.server().expect("server");
        let ordered = server.ordered_buffers();
        for _ in 0..20 {
            // Buffers of `a` that graphs of `b` read: shared, so ordered.
            let inputs: Vec<_> = (0..4)
                .map(|i| client.create(a, &[i; 16]).expect("an input"))
                .collect();
            let out = client.create(b, &[0; 16]).expect("out");
            let graphs: Vec<_> = inputs
                .iter()
                .map(|input| {
                    client
                        .capture(b, |_| {
                            client.launch(b, &copy, [1, 1, 1], &[input, &out], &[], &[])
                        })
                        .expect("capture")
                        .0
                })
                .collect();
            let droppers: Vec<_> = inputs
                .into_iter()
                .map(|input| std::thread::spawn(move || drop(input)))
                .collect();
            for graph in &graphs {
                client.replay(graph).expect("replay");
            }
            drop(graphs);
            for dropper in droppers {
                dropper.join().expect("a dropping thread");
            }
            drop(out);
        }
        client.sync(a).expect("a collects what was dropped");
        client.sync(b).expect("b");
        client.sync(a).expect("a, past b's queued uses");
        assert_eq!(client.lingering_buffers(), 0);
        assert_eq!(server.ordered_buffers(), ordered, "every order forgotten");
        assert_eq!(client.claimed_buffers(), 0);
    }

    #[test]
    fn an_adopted_stream_of_the_clients_device_works_and_another_devices_is_refused() {
        use crate::Driver;
        let (client, other) = (client(), client());
        let raw = TestDriver::create_stream(other.device()).expect("a raw stream");
        let err = client.adopt_stream(raw).expect_err("another device's");
        assert_eq!(
            err,
            Error::OtherDevice {
                backend: TestDriver::NAME,
                what: "stream"
            }
        );
        let raw = TestDriver::create_stream(client.device()).expect("a raw stream");
        let adopted = client.adopt_stream(raw).expect("its own device's");
        let own = client.create_stream().expect("a stream of its own");
        assert_ne!(adopted, own, "numbered like any");
        let x = client.create(adopted, &[1; 8]).expect("a buffer");
        assert_eq!(client.read(&x).expect("read"), vec![1; 8]);
    }

    #[test]
    fn a_buffers_device_slice_names_its_page_offset_and_length_views_included() {
        let (client, other) = (client(), client());
        let stream = client.create_stream().expect("stream");
        let align = crate::SLICE_ALIGN;
        let x = client.create(stream, &[2; 1024]).expect("x");
        let whole = client
            .with_device_slice(&x, |slice| (slice.offset, slice.len))
            .expect("x's slice");
        assert_eq!(whole.1, 1024);
        let view = x.range(align, 8).expect("a view");
        let part = client
            .with_device_slice(&view, |slice| (slice.offset, slice.len))
            .expect("the view's slice");
        assert_eq!(part, (whole.0 + align, 8));
        assert_eq!(
            other.with_device_slice(&x, |_| ()),
            Err(Error::OtherClient(x.id()))
        );
        client.destroy_stream(stream).expect("destroy");
        assert_eq!(
            client.with_device_slice(&x, |_| ()),
            Err(Error::UnknownStream(stream))
        );
    }

    #[test]
    fn a_panic_in_a_device_slice_closure_leaves_the_stream_usable() {
        let client = client();
        let stream = client.create_stream().expect("stream");
        let x = client.create(stream, &[3; 8]).expect("x");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            client.with_device_slice(&x, |_| panic!("the caller's closure"))
        }));
        assert!(caught.is_err(), "the panic reaches the caller");
        assert_eq!(client.read(&x).expect("the stream still works"), vec![3; 8]);
        let y = client.create(stream, &[4; 8]).expect("and allocates");
        assert_eq!(client.read(&y).expect("read"), vec![4; 8]);
    }
}
