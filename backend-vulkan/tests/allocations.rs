//! An eager launch and a replay allocate nothing on the heap: counted on
//! the calling thread after a warm-up, a thousand builtin launches through
//! `capture_core::Client` and a thousand replays of a captured graph make
//! zero allocations, driver calls included.
//!
//! The counting allocator is the benches crate's, compiled into this test
//! from its source so the backend's tests build on their own.
//!
//! Each test skips, saying why, when no Vulkan device is available.

#[path = "../../benches/src/alloc_counter.rs"]
#[allow(dead_code)]
mod alloc_counter;

use alloc_counter::CountingAlloc;
use backend_vulkan::Vulkan;
use capture_core::{Availability, Builtin, Client, Driver};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Calls measured.
const CALLS: u64 = 1000;
/// Calls before measuring: enough to cycle every eager command buffer of a
/// stream several times and to fill and flush the core's drop queue.
const WARMUP: u64 = 3000;
/// Elements each launch adds.
const N: u32 = 1024;

/// A client on the default device, or `None` (said why) without one.
fn client(test: &str) -> Option<Client<Vulkan>> {
    if let Availability::Unavailable(reason) = Vulkan::probe() {
        eprintln!("skipping {test}: vulkan unavailable: {reason}");
        return None;
    }
    Some(Client::open().expect("open after a successful probe"))
}

/// Heap allocations `f` makes on this thread.
fn allocations_of(f: impl FnOnce()) -> u64 {
    let before = alloc_counter::allocations();
    f();
    alloc_counter::allocations() - before
}

#[test]
fn the_counter_is_installed() {
    assert!(alloc_counter::installed());
}

#[test]
fn eager_builtin_launches_allocate_nothing() {
    let Some(client) = client("eager_builtin_launches_allocate_nothing") else {
        return;
    };
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[0.0; N as usize]).expect("x");
    let ones = client.create_f32(stream, &[1.0; N as usize]).expect("ones");
    let add = || {
        client
            .run_builtin(stream, Builtin::Add, &[&x, &ones], N, 0.0)
            .expect("add");
    };
    for _ in 0..WARMUP {
        add();
    }
    client.sync(stream).expect("sync");
    let counted = allocations_of(|| {
        for _ in 0..CALLS {
            add();
        }
    });
    client.sync(stream).expect("sync");
    assert_eq!(
        counted, 0,
        "{CALLS} eager launches allocated {counted} times"
    );
    let got = client.read_f32(&x).expect("read");
    let want = (WARMUP + CALLS) as f32;
    assert!(got.iter().all(|&v| v == want), "{:?}", &got[..4]);
}

#[test]
fn replays_allocate_nothing() {
    let Some(client) = client("replays_allocate_nothing") else {
        return;
    };
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[0.0; N as usize]).expect("x");
    let ones = client.create_f32(stream, &[1.0; N as usize]).expect("ones");
    let (graph, ()) = client
        .capture(stream, |_| {
            for _ in 0..4 {
                client.run_builtin(stream, Builtin::Add, &[&x, &ones], N, 0.0)?;
            }
            Ok(())
        })
        .expect("capture");
    for _ in 0..WARMUP {
        graph.replay().expect("replay");
    }
    client.sync(stream).expect("sync");
    let counted = allocations_of(|| {
        for _ in 0..CALLS {
            graph.replay().expect("replay");
        }
    });
    client.sync(stream).expect("sync");
    assert_eq!(counted, 0, "{CALLS} replays allocated {counted} times");
    // The warmup pass ran once for real, then every replay adds four.
    let got = client.read_f32(&x).expect("read");
    let want = (4 + 4 * (WARMUP + CALLS)) as f32;
    assert!(got.iter().all(|&v| v == want), "{:?}", &got[..4]);
}
