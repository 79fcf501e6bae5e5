//! Collectives across host devices: a group of clients, one per device,
//! each with a graph around the same foreign all-reduce (the host's
//! reference one, `workload::collective`), replayed together; and a rank
//! whose replay is refused, which fails every rank rather than letting any
//! read the bytes the group never reduced.
//!
//! The library orders each rank's work around its all-reduce (the add
//! before it, the add after it reading what it wrote); the rendezvous
//! orders the ranks among themselves, as NCCL does on GPUs. Ranks beyond
//! the host backend's device indices open a device object of their own on
//! an index another rank uses.

use std::sync::Arc;

use conformance::workload::collective::Rendezvous;
use conformance::{FaultPlan, Faulty, Primitive, Session};
use graph_capture::host::{DEVICES, Host};
use graph_capture::{Buffer, Builtin, Client, Driver, Error, GraphHandle, Kernel, StreamId};

const N: usize = 64;

/// One rank: its client (whose driver fails where its plan says), stream,
/// buffers and all-reduce.
struct Rank {
    client: Client<Faulty<Host>>,
    plan: Arc<FaultPlan>,
    stream: StreamId,
    x: Buffer,
    y: Buffer,
    one: Buffer,
    all_reduce: Kernel<Faulty<Host>>,
}

/// `ranks` ranks meeting at one rendezvous, rank `r`'s `x` starting at
/// `r + 1`.
fn group(ranks: usize) -> (Arc<Rendezvous>, Vec<Rank>) {
    let rendezvous = Rendezvous::new(ranks);
    let members = (0..ranks)
        .map(|r| {
            let device = Host::open_index(r % DEVICES).expect("a host device");
            let (client, plan) = Session::<Host>::new(device).faulty();
            let stream = client.create_stream().expect("a stream");
            let buffer = |v: f32| client.create_f32(stream, &[v; N]).expect("a buffer");
            let (x, y, one) = (buffer(r as f32 + 1.0), buffer(0.0), buffer(1.0));
            let all_reduce = Kernel::new(rendezvous.op(r).expect("the all-reduce"));
            Rank {
                client,
                plan,
                stream,
                x,
                y,
                one,
                all_reduce,
            }
        })
        .collect();
    (rendezvous, members)
}

/// A rank's step: `x += 1` (ours), the all-reduce of `x` (foreign), then
/// `y += x` (ours).
fn step(rank: &Rank) -> Result<(), Error> {
    let (c, s) = (&rank.client, rank.stream);
    c.run_builtin(s, Builtin::Add, &[&rank.x, &rank.one], N as u32, 0.0)?;
    c.foreign(s, &rank.all_reduce, &[&rank.x])?;
    c.run_builtin(s, Builtin::Add, &[&rank.y, &rank.x], N as u32, 0.0)
}

/// The step's graph, recorded without a warmup (a warmup would meet the
/// other ranks' warmups): an eager step before warms its info bytes.
fn capture(rank: &Rank) -> GraphHandle<Faulty<Host>> {
    let (c, s) = (&rank.client, rank.stream);
    let window = c.prepare(s).expect("prepare");
    c.begin(s, window).expect("begin");
    step(rank).expect("the recorded step");
    c.instantiate(s, window).expect("instantiate")
}

/// Every rank's `x` and `y` after `steps` steps, in plain Rust.
fn expected(ranks: usize, steps: usize) -> (f32, f32) {
    let mut xs: Vec<f32> = (0..ranks).map(|r| r as f32 + 1.0).collect();
    let mut y = 0.0;
    for _ in 0..steps {
        let sum: f32 = xs.iter().map(|x| x + 1.0).sum();
        xs.fill(sum);
        y += sum;
    }
    (xs[0], y)
}

#[test]
fn an_all_reduce_across_two_to_eight_host_devices_replays_in_each_ranks_graph() {
    for ranks in [2, 3, 8] {
        let (_group, members) = group(ranks);
        // Eagerly first: each rank's step issued, the workers meeting.
        for rank in &members {
            step(rank).expect("an eager step");
        }
        let graphs: Vec<_> = members.iter().map(capture).collect();
        // Replays issued rank after rank from one thread: each is enqueued,
        // and the ranks' workers meet at every all-reduce.
        for _ in 0..10 {
            for graph in &graphs {
                graph.replay().expect("a replay");
            }
        }
        let (x, y) = expected(ranks, 11);
        for (r, rank) in members.iter().enumerate() {
            assert_eq!(
                rank.client.read_f32(&rank.x).expect("x"),
                vec![x; N],
                "rank {r} of {ranks}: x"
            );
            assert_eq!(
                rank.client.read_f32(&rank.y).expect("y"),
                vec![y; N],
                "rank {r} of {ranks}: y"
            );
        }
    }
}

#[test]
fn a_rank_whose_replay_is_refused_fails_every_rank() {
    let (group, members) = group(4);
    // An eager round first, which also warms each stream's info bytes.
    for rank in &members {
        step(rank).expect("an eager step");
    }
    let graphs: Vec<_> = members.iter().map(capture).collect();
    members[2].plan.fail(Primitive::Replay, 1);
    let mut refused = Vec::new();
    for (r, graph) in graphs.iter().enumerate() {
        if let Err(err) = graph.replay() {
            // What a caller of a collectives library does: the group gives
            // up, so that no rank waits for the one that never comes.
            group.abandon(&format!("rank {r}'s replay was refused: {err}"));
            refused.push(r);
        }
    }
    assert_eq!(refused, [2]);
    // The refused rank's graph claims what it writes.
    let rank = &members[2];
    assert!(matches!(
        rank.client.read(&rank.x),
        Err(Error::Claimed { .. })
    ));
    assert!(matches!(
        rank.client.read(&rank.y),
        Err(Error::Claimed { .. })
    ));
    // Every other rank's all-reduce failed as it ran: its stream's next
    // fence says so, and no read returns the bytes the group never reduced.
    for r in [0, 1, 3] {
        let rank = &members[r];
        let err = rank.client.sync(rank.stream).expect_err("the fault");
        assert!(err.to_string().contains("abandoned"), "rank {r}: {err}");
        assert!(
            rank.client.read(&rank.x).is_err(),
            "rank {r}: x read as fresh"
        );
    }
}
