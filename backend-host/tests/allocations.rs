//! On the host backend, a replay and an eager launch allocate nothing on
//! the calling thread, through capture-core or through the raw driver: the
//! worker's queue is allocated once, and a launch's bindings and parameters
//! are held inline.
//!
//! Each side is measured over several rounds, interleaved, and the fewest
//! allocations of a round compared: a round that happens to collect a
//! dropped buffer or grow a pool is not a launch's cost.

use backend_host::Host;
use benches::alloc_counter::{self, CountingAlloc};
use benches::{Fixture, RawAdd, Sample, measure};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

const CALLS: u64 = 1000;
const ROUNDS: usize = 16;
const WARMUP: u64 = 8;

fn fewest(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| s.allocations).min().unwrap_or(0)
}

fn counts(samples: &[Sample]) -> Vec<u64> {
    samples.iter().map(|s| s.allocations).collect()
}

#[test]
fn the_counter_is_installed_and_per_thread() {
    assert!(alloc_counter::installed());
    let before = alloc_counter::allocations();
    std::thread::spawn(|| drop(std::hint::black_box(vec![0u8; 64])))
        .join()
        .unwrap_or_else(|_| panic!("the allocating thread panicked"));
    let spawned = alloc_counter::allocations() - before;
    let before = alloc_counter::allocations();
    for _ in 0..100 {
        drop(std::hint::black_box(vec![0u8; 64]));
    }
    assert_eq!(alloc_counter::allocations() - before, 100);
    // Spawning allocates on this thread, but the 64 bytes the other thread
    // allocated are not counted here: far fewer than a hundred.
    assert!(spawned < 100, "{spawned} allocations counted for a spawn");
}

#[test]
fn a_replay_allocates_nothing() {
    let mut fx = Fixture::<Host>::open().expect("open the host backend");
    let graph = fx.graph(1).expect("capture one add");
    measure::replay_raw(&mut fx, &graph, WARMUP).expect("warm the raw replay");
    measure::replay_core(&mut fx, &graph, WARMUP).expect("warm the core replay");
    let (mut raw, mut core) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        raw.push(measure::replay_raw(&mut fx, &graph, CALLS).expect("raw replays"));
        core.push(measure::replay_core(&mut fx, &graph, CALLS).expect("core replays"));
    }
    eprintln!(
        "{CALLS} replays, allocations per round: core {:?}, raw {:?}",
        counts(&core),
        counts(&raw)
    );
    assert!(
        fewest(&core) == 0 && fewest(&raw) == 0,
        "{CALLS} replays through capture-core allocated {:?} times per round, \
         the raw driver {:?}",
        counts(&core),
        counts(&raw)
    );
}

#[test]
fn an_eager_launch_allocates_nothing() {
    let mut fx = Fixture::<Host>::open().expect("open the host backend");
    let raw_add = RawAdd::new(&fx).expect("compile add for the raw driver");
    measure::eager_raw(&mut fx, &raw_add, WARMUP).expect("warm the raw launch");
    measure::eager_core(&mut fx, WARMUP).expect("warm the core launch");
    let (mut raw, mut core) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        raw.push(measure::eager_raw(&mut fx, &raw_add, CALLS).expect("raw launches"));
        core.push(measure::eager_core(&mut fx, CALLS).expect("core launches"));
    }
    eprintln!(
        "{CALLS} eager launches, allocations per round: core {:?}, raw {:?}",
        counts(&core),
        counts(&raw)
    );
    assert!(
        fewest(&core) == 0 && fewest(&raw) == 0,
        "{CALLS} eager launches through capture-core allocated {:?} times per round, \
         the raw driver {:?}",
        counts(&core),
        counts(&raw)
    );
}
