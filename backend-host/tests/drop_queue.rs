//! Frees wait for the device exactly as long as they must: a reclaim of the
//! drop queue never waits, a pool that must reuse a freed slice waits for
//! that slice's last use and not for the work queued after it, a slice the
//! device is past is reused at once, and none is reused before its last use
//! is done.
//!
//! A slow kernel (a host closure that sleeps) is queued after a buffer's
//! last use; the calls that reclaim and reuse its slice are timed against
//! the sync that waits for the slow kernel, as a ratio.

use std::time::{Duration, Instant};

use backend_host::{Host, Kernel};
use capture_core::{Access, Buffer, Client, Config, Error, Params, Signature, StreamId};

const SLOW: Duration = Duration::from_millis(400);

fn kernels() -> (capture_core::Kernel<Host>, capture_core::Kernel<Host>) {
    let touch = Kernel::new(
        Signature::new("touch")
            .binding(Access::Write)
            .param(4)
            .workgroup([1, 1, 1]),
        |group, buffers| {
            let value = group.params().f32()?;
            buffers[0].f32_mut()?.fill(value);
            Ok(())
        },
    )
    .expect("touch");
    let slow = Kernel::new(
        Signature::new("slow")
            .binding(Access::Write)
            .param(4)
            .workgroup([1, 1, 1]),
        |group, buffers| {
            std::thread::sleep(SLOW);
            let value = group.params().f32()?;
            buffers[0].f32_mut()?.fill(value);
            Ok(())
        },
    )
    .expect("slow");
    (
        capture_core::Kernel::new(touch),
        capture_core::Kernel::new(slow),
    )
}

/// A client on its own config, one stream, and the two kernels.
struct Setup {
    client: Client<Host>,
    stream: StreamId,
    touch: capture_core::Kernel<Host>,
    slow: capture_core::Kernel<Host>,
}

impl Setup {
    fn new(config: Config) -> Self {
        let client = Client::<Host>::open_with(config).expect("open");
        let stream = client.create_stream().expect("stream");
        let (touch, slow) = kernels();
        Self {
            client,
            stream,
            touch,
            slow,
        }
    }

    /// Pages of 1 KiB: four 256-byte slices fill one.
    fn four_slice_pages() -> Self {
        Self::new(Config {
            device_page_bytes: 1024,
            first_page_bytes: 1024,
            // A window's temporaries stay in the window's own pages, so the
            // tests know every page's slices.
            share_temporaries: false,
            ..Config::default()
        })
    }

    /// A 256-byte buffer.
    fn slice(&self) -> Buffer {
        self.client.allocate(self.stream, 256).expect("a slice")
    }

    /// Launch `kernel` over `buffer`, writing 1.0.
    fn run(&self, kernel: &capture_core::Kernel<Host>, buffer: &Buffer) -> Result<(), Error> {
        let one = Params::new().f32(1.0);
        self.client.launch(
            self.stream,
            kernel,
            [1, 1, 1],
            &[buffer],
            &[],
            one.as_bytes(),
        )
    }

    /// Frees waiting in the drop queue.
    fn pending(&self) -> usize {
        self.client.usage(self.stream).expect("usage").pending_drops
    }

    /// Sync, and assert that `what`, which took `call`, did not wait for
    /// the slow work: it took under a quarter of what the sync still waited.
    fn assert_did_not_wait(&self, what: &str, call: Duration) {
        let ((), rest) = timed(|| self.client.sync(self.stream).expect("sync"));
        let ratio = call.as_secs_f64() / rest.as_secs_f64().max(1e-9);
        assert!(
            ratio < 0.25,
            "{what} took {call:?}, the slow work still had {rest:?} to go (ratio {ratio:.2}): \
             it waited for work queued after the free"
        );
    }
}

/// What `f` answers, and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let answer = f();
    (answer, started.elapsed())
}

#[test]
fn a_pool_miss_waits_for_the_freed_slice_only() {
    let s = Setup::four_slice_pages();
    let buffers: Vec<_> = (0..4).map(|_| s.slice()).collect();
    assert!(
        buffers
            .iter()
            .all(|b| b.placement().page == buffers[0].placement().page),
        "the four share one page"
    );
    let [a, b, c, d] = <[_; 4]>::try_from(buffers).expect("four");
    s.run(&s.touch, &b).expect("b's last use");
    let freed = b.placement();
    drop(b);
    // Queued after b's last use: the reuse below must not wait for it.
    s.run(&s.slow, &c).expect("slow work");
    let (e, reuse) = timed(|| s.slice());
    assert!(
        e.placement().overlaps(&freed),
        "e reuses b's slice instead of growing"
    );
    s.assert_did_not_wait("the reuse", reuse);
    drop((a, d, e));
}

#[test]
fn a_reclaim_never_waits() {
    let s = Setup::new(Config {
        drop_queue_threshold: 1,
        ..Config::default()
    });
    let (a, c) = (s.slice(), s.slice());
    s.client.sync(s.stream).expect("sync");
    s.run(&s.slow, &c).expect("slow work");
    drop(a);
    // The next call collects a, which passes the threshold: the reclaim
    // asks the device without waiting for the slow kernel.
    let (pending, call) = timed(|| {
        s.run(&s.touch, &c).expect("a launch");
        s.pending()
    });
    assert_eq!(pending, 1, "a waits: its stamp is after the slow kernel");
    s.assert_did_not_wait("the reclaiming call", call);
    assert_eq!(s.pending(), 0, "a sync frees it");
}

#[test]
fn a_free_after_a_launch_waits_for_that_launch() {
    let s = Setup::four_slice_pages();
    let [a, b, c, d] = [(); 4].map(|()| s.slice());
    // A graph whose window freed an intermediate of a whole page: once the
    // window closes, the drop queue holds a stamped batch for it.
    let (graph, ()) = s
        .client
        .capture(s.stream, |_| {
            let t = s.client.allocate(s.stream, 1024)?;
            s.run(&s.touch, &t)
        })
        .expect("capture");
    std::thread::sleep(Duration::from_millis(50));
    s.run(&s.slow, &a).expect("a's last use, slow");
    let freed = a.placement();
    drop(a);
    // Collects a: it must wait for the slow launch, not join the earlier
    // batch the device is already past.
    s.run(&s.touch, &b).expect("another launch");
    let (e, waited) = timed(|| s.slice());
    assert!(
        e.placement().overlaps(&freed),
        "e reuses a's slice: every page is full"
    );
    assert!(
        waited >= SLOW / 2,
        "e took a's slice after {waited:?}, while a's last use ran for {SLOW:?}"
    );
    drop((b, c, d, e, graph));
}

#[test]
fn the_threshold_reclaims_what_the_device_is_past_without_a_sync() {
    let s = Setup::new(Config {
        drop_queue_threshold: 1,
        ..Config::default()
    });
    let (a, b) = (s.slice(), s.slice());
    s.client.sync(s.stream).expect("sync");
    s.run(&s.slow, &a).expect("a's last use, slow");
    drop(a);
    s.run(&s.touch, &b).expect("collects a");
    assert_eq!(s.pending(), 1, "a waits for its last use");
    std::thread::sleep(SLOW + Duration::from_millis(100));
    s.run(&s.touch, &b).expect("a launch past the threshold");
    assert_eq!(
        s.pending(),
        0,
        "the device is past a's last use: freed with no sync"
    );
}

#[test]
fn a_pool_miss_reuses_what_the_device_is_past_without_waiting() {
    let s = Setup::four_slice_pages();
    let [a, b, c, d] = [(); 4].map(|()| s.slice());
    s.run(&s.touch, &a).expect("a's last use");
    let freed = a.placement();
    drop(a);
    s.run(&s.slow, &b).expect("slow work after a's free");
    // The device is past a's last use, not past the slow launch.
    std::thread::sleep(Duration::from_millis(50));
    let (e, took) = timed(|| s.slice());
    assert!(e.placement().overlaps(&freed), "e takes a's slice");
    assert!(
        took < SLOW / 4,
        "taking a slice the device is past took {took:?}: it waited for later work"
    );
    drop((b, c, d, e));
}
