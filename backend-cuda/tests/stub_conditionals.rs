//! Conditional nodes recorded through the public `Client`, against the stub
//! whose graphs run on host memory and which models conditional handles,
//! conditional nodes with their body graphs, and the library's setter
//! kernels (each reads its flag's `u32` in the stub's device memory): an
//! `if` and an `if/else` replayed with the flag set and clear, on a 12.4
//! driver (an if/else as two `if` nodes, an empty body given the no-op
//! kernel) and a 12.8 one (one node of two bodies); a loop running 0, 1, k and
//! `bound` iterations, the flag still set after the bound; a loop nested in
//! an `if` and an `if` in the loop; a body's dependency graph handed
//! through to its body graph; a refused node creation leaving the stream
//! able to capture again; an invalidated body's capture abandoning the
//! stream's capture rather than ending it; dependencies whose edges carry
//! data; and a driver without the functions, one too old,
//! and one refusing the setter module, each refused with its reason while
//! the eager conditionals still run.
//!
//! Each case runs in a child process (this test binary, run again with the
//! stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::sync::Arc;

use backend_cuda::{Cuda, Device, Kernel};
use capture_core::{
    Access, Buffer, Builtin, BuiltinInfo, Client, Config, Driver, Error, GraphHandle, Pass, Ran,
    ReplayOrder, Signature, StreamId, Update,
};

mod runs_stub;
use runs_stub::{Children, stub_dir, stub_fn, stub_function, stub_int};

const DONE: &str = "CONDITIONALS_CHILD_DONE";
const CHILDREN: Children = Children {
    marker: "BACKEND_CUDA_CONDITIONALS_CHILD",
    done: DONE,
};

/// Elements of the test's float buffers.
const N: usize = 64;
/// The most iterations the test's loops make.
const BOUND: u32 = 5;

fn in_child() -> bool {
    CHILDREN.inside()
}

/// Run `test` again in a child with the stub of `dir` first on the library
/// path, its setter kernels loading, and `vars` set.
fn in_stub(test: &str, dir: &str, vars: &[(&str, &str)]) {
    let vars: Vec<(&str, &str)> = [("CUDA_STUB_SETTER_RESULT", "0")]
        .into_iter()
        .chain(vars.iter().copied())
        .collect();
    CHILDREN.run(test, dir, &vars);
}

/// The `index`-th conditional node (depth first) of the graph the stub
/// last instantiated: its type (0 if, 1 while) times 10 plus its bodies.
fn conditional_kind(index: i32) -> i32 {
    // SAFETY: `int cuStubConditionalKind(int)`.
    let function = unsafe { stub_fn::<unsafe extern "C" fn(i32) -> i32>("cuStubConditionalKind") };
    // SAFETY: a plain value.
    unsafe { function(index) }
}

/// Body `body` of the `index`-th conditional node of the graph the stub
/// last instantiated: its node kinds in creation order, and its edges as
/// node positions, sorted.
type BodyShape = (Vec<u32>, Vec<(usize, usize)>);

fn conditional_body(index: i32, body: u32) -> BodyShape {
    const MAX: usize = 64;
    type Body = unsafe extern "C" fn(
        i32,
        u32,
        *mut usize,
        *mut u32,
        *mut usize,
        *mut usize,
        usize,
    ) -> isize;
    // SAFETY: the prototype of cuStubConditionalBody.
    let function = unsafe { stub_fn::<Body>("cuStubConditionalBody") };
    let mut nodes = 0usize;
    let mut kinds = [0u32; MAX];
    let (mut from, mut to) = ([0usize; MAX], [0usize; MAX]);
    // SAFETY: every array holds `MAX` entries, which is passed; the stub
    // writes at most that many.
    let edges = unsafe {
        function(
            index,
            body,
            &mut nodes,
            kinds.as_mut_ptr(),
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            MAX,
        )
    };
    let edges = usize::try_from(edges).unwrap_or_else(|_| panic!("no body {body} of {index}"));
    assert!(nodes <= MAX && edges <= MAX, "{nodes} nodes, {edges} edges");
    let mut pairs: Vec<(usize, usize)> = from[..edges]
        .iter()
        .copied()
        .zip(to[..edges].iter().copied())
        .collect();
    pairs.sort_unstable();
    (kinds[..nodes].to_vec(), pairs)
}

/// Make the stub's next `cuGraphAddNode_v2` answer `code`.
fn fail_next_add_node(code: i32) {
    // SAFETY: `void cuStubFailNextAddNode(int)`.
    let function = unsafe { stub_fn::<unsafe extern "C" fn(i32)>("cuStubFailNextAddNode") };
    // SAFETY: a plain value.
    unsafe { function(code) }
}

/// The stub's graph node kinds.
const KERNEL: u32 = 0;
const MEMCPY: u32 = 1;
const CONDITIONAL: u32 = 13;

/// What every case works on: a client of the stub's device, its kernels,
/// an accumulator `x` and the values added to it, a flag and a second one,
/// and a loop's counter.
struct Rig {
    client: Client<Cuda>,
    stream: StreamId,
    add: capture_core::Kernel<Cuda>,
    countdown: capture_core::Kernel<Cuda>,
    x: Buffer,
    y: Buffer,
    ones: Buffer,
    twos: Buffer,
    flag: Buffer,
    outer: Buffer,
    counter: Buffer,
}

impl Rig {
    fn new(order: ReplayOrder) -> Self {
        let device = Cuda::open_index(0).expect("the stub opens device 0");
        let config = Config {
            replay_order: order,
            ..Config::default()
        };
        let client = Client::<Cuda>::with_device(Arc::clone(&device), config);
        let stream = client.create_stream().expect("a stream");
        let add = stub_kernel(&device, "add", Builtin::Add.signature());
        // The stub's countdown: a u32 counter and a u32 flag, both written.
        let countdown = stub_kernel(
            &device,
            "countdown",
            Signature::new("countdown").bindings(&[Access::ReadWrite, Access::ReadWrite]),
        );
        let u32_buffer = |value: u32| {
            client
                .create(stream, &value.to_le_bytes())
                .expect("a u32 buffer")
        };
        Self {
            x: client.create_f32(stream, &[0.0; N]).expect("x"),
            y: client.create_f32(stream, &[0.0; N]).expect("y"),
            ones: client.create_f32(stream, &[1.0; N]).expect("ones"),
            twos: client.create_f32(stream, &[2.0; N]).expect("twos"),
            flag: u32_buffer(0),
            outer: u32_buffer(0),
            counter: u32_buffer(0),
            client,
            stream,
            add,
            countdown,
        }
    }

    /// `to += what`, on every element.
    fn add(&self, to: &Buffer, what: &Buffer) -> Result<(), Error> {
        let info = BuiltinInfo::new(N as u32, 0.0).to_bytes();
        self.client
            .launch(self.stream, &self.add, [1, 1, 1], &[to, what], &info, &[])
    }

    /// Count the counter down; the flag says whether it is still above 0.
    fn countdown(&self) -> Result<(), Error> {
        self.client.launch(
            self.stream,
            &self.countdown,
            [1, 1, 1],
            &[&self.counter, &self.flag],
            &[],
            &[],
        )
    }

    /// `x += 1` and count down, while the flag is set, at most `bound`
    /// times.
    fn counted_loop(&self, bound: u32) -> Result<Ran, Error> {
        self.client.while_flag(self.stream, &self.flag, bound, || {
            self.add(&self.x, &self.ones)?;
            self.countdown()
        })
    }

    fn set(&self, buffer: &Buffer, value: u32) {
        self.client
            .write(buffer, &value.to_le_bytes())
            .expect("write a u32");
    }

    fn get(&self, buffer: &Buffer) -> u32 {
        let bytes = self.client.read(buffer).expect("read a u32");
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }

    /// The loop armed to run `k` times, `x` zero.
    fn arm(&self, k: u32) {
        self.set(&self.counter, k);
        self.set(&self.flag, u32::from(k > 0));
        self.zero();
    }

    fn zero(&self) {
        self.client.write_f32(&self.x, &[0.0; N]).expect("zero x");
        self.client.write_f32(&self.y, &[0.0; N]).expect("zero y");
    }

    /// Every element of `buffer`, which must all be equal.
    fn value(&self, buffer: &Buffer) -> f32 {
        let values = self.client.read_f32(buffer).expect("read floats");
        assert!(values.iter().all(|&v| v == values[0]), "{values:?}");
        values[0]
    }

    fn capture(&self, body: impl Fn() -> Result<(), Error>) -> Result<GraphHandle<Cuda>, Error> {
        self.client
            .capture(self.stream, |_pass: Pass| body())
            .map(|(graph, ())| graph)
    }

    fn replay(&self, graph: &GraphHandle<Cuda>) {
        graph.replay().expect("the graph replays");
        self.client.sync(self.stream).expect("sync");
    }
}

/// The stub's `name` kernel as a kernel of `device`, with `signature`.
fn stub_kernel(
    device: &Arc<Device>,
    name: &str,
    signature: Signature,
) -> capture_core::Kernel<Cuda> {
    // SAFETY: the stub's kernels take what their signatures say and touch
    // only the first N elements (or the one u32) of each buffer, which
    // every buffer here holds.
    let kernel = unsafe { Kernel::from_raw(device, stub_function(name), signature, ()) };
    capture_core::Kernel::new(kernel.expect("a kernel over the stub's function"))
}

/// In the child: an if/else and an if, captured and replayed with the flag
/// set and clear, on a driver of `version`; the graph's nodes as that
/// driver makes them.
fn check_if_and_if_else(version: u32) {
    let rig = Rig::new(ReplayOrder::Dependencies);
    let graph = rig
        .capture(|| {
            rig.client.if_else_flag(
                rig.stream,
                &rig.flag,
                || rig.add(&rig.x, &rig.ones),
                || rig.add(&rig.x, &rig.twos),
            )?;
            rig.client
                .if_flag(rig.stream, &rig.flag, || rig.add(&rig.x, &rig.twos))?;
            Ok(())
        })
        .expect("the conditionals are recorded");
    if version >= 12080 {
        // One if node of two bodies, then an if.
        assert_eq!(stub_int("cuStubConditionals"), 2);
        assert_eq!((conditional_kind(0), conditional_kind(1)), (2, 1));
    } else {
        // Two if nodes over one setter, then an if.
        assert_eq!(stub_int("cuStubConditionals"), 3);
        let kinds: Vec<i32> = (0..3).map(conditional_kind).collect();
        assert_eq!(kinds, [1, 1, 1]);
    }
    let runs = stub_int("cuStubSettersRun");
    for (flag, expected) in [(1, 3.0), (0, 2.0), (7, 3.0)] {
        rig.zero();
        rig.set(&rig.flag, flag);
        rig.replay(&graph);
        assert_eq!(rig.value(&rig.x), expected, "flag {flag}");
        assert_eq!(rig.get(&rig.flag), flag, "the flag is the caller's");
    }
    assert_eq!(
        stub_int("cuStubSettersRun"),
        runs + 6,
        "two setters a replay"
    );
    // Eagerly the same, on the host's word.
    rig.zero();
    rig.set(&rig.flag, 0);
    let ran = rig
        .client
        .if_else_flag(
            rig.stream,
            &rig.flag,
            || rig.add(&rig.x, &rig.ones),
            || rig.add(&rig.x, &rig.twos),
        )
        .expect("an eager if/else");
    assert_eq!(ran, Ran::Branch(Some(1)));
    assert_eq!(rig.value(&rig.x), 2.0);
    drop(graph);
    println!("\n{DONE}");
}

#[test]
fn an_if_and_an_if_else_replay_as_the_flag_says_on_a_12_4_driver() {
    if in_child() {
        return check_if_and_if_else(12040);
    }
    in_stub(
        "an_if_and_an_if_else_replay_as_the_flag_says_on_a_12_4_driver",
        &stub_dir(None),
        &[("CUDA_STUB_DRIVER_VERSION", "12040")],
    );
}

#[test]
fn an_if_and_an_if_else_replay_as_the_flag_says_on_a_12_8_driver() {
    if in_child() {
        return check_if_and_if_else(12080);
    }
    in_stub(
        "an_if_and_an_if_else_replay_as_the_flag_says_on_a_12_8_driver",
        &stub_dir(None),
        &[("CUDA_STUB_DRIVER_VERSION", "12080")],
    );
}

/// Where the nodes a conditional follows carry edge data (the caller's
/// programmatic launches on an adopted stream leave such edges), the
/// driver refuses a capture query with no place for the data; the library
/// gives it one.
#[test]
fn a_conditional_follows_dependencies_whose_edges_carry_data() {
    if in_child() {
        return check_if_and_if_else(12080);
    }
    in_stub(
        "a_conditional_follows_dependencies_whose_edges_carry_data",
        &stub_dir(None),
        &[
            ("CUDA_STUB_DRIVER_VERSION", "12080"),
            ("CUDA_STUB_EDGE_DATA", "1"),
        ],
    );
}

/// In the child: a bounded loop replayed to run 0, 1, k and `BOUND`
/// iterations, and past the bound, where the flag stays set.
fn check_loop_iterations() {
    let rig = Rig::new(ReplayOrder::Dependencies);
    rig.arm(2);
    let graph = rig
        .capture(|| rig.counted_loop(BOUND).map(drop))
        .expect("the loop is recorded");
    assert_eq!(conditional_kind(0), 11, "one while node of one body");
    for k in [0, 1, 3, BOUND, BOUND + 2] {
        rig.arm(k);
        rig.replay(&graph);
        let iterations = k.min(BOUND);
        assert_eq!(rig.value(&rig.x), iterations as f32, "k = {k}");
        assert_eq!(rig.get(&rig.counter), k - iterations, "k = {k}");
        assert_eq!(
            rig.get(&rig.flag),
            u32::from(k > BOUND),
            "k = {k}: the flag is still set only where the bound stopped the loop"
        );
    }
    // A replay whose flag is still set runs the loop again, bound and all.
    rig.zero();
    rig.replay(&graph);
    assert_eq!(rig.value(&rig.x), 2.0, "the two iterations left");
    assert_eq!(rig.get(&rig.flag), 0);
    // Eagerly, the bound says so too.
    rig.arm(BOUND + 1);
    let ran = rig.counted_loop(BOUND).expect("an eager loop");
    assert_eq!(
        ran,
        Ran::Loop {
            iterations: BOUND,
            bound_reached: true
        }
    );
    // A loop bounded at zero never runs, and leaves its flag set.
    rig.arm(2);
    let never = rig
        .capture(|| rig.counted_loop(0).map(drop))
        .expect("a loop bounded at zero is recorded");
    rig.arm(2);
    rig.replay(&never);
    assert_eq!(rig.value(&rig.x), 0.0);
    assert_eq!(rig.get(&rig.flag), 1);
    println!("\n{DONE}");
}

#[test]
fn a_loop_runs_zero_one_k_and_bound_iterations_and_the_bound_leaves_the_flag_set() {
    if in_child() {
        return check_loop_iterations();
    }
    in_stub(
        "a_loop_runs_zero_one_k_and_bound_iterations_and_the_bound_leaves_the_flag_set",
        &stub_dir(None),
        &[],
    );
}

/// In the child: a loop in an if, with an if in the loop's body: three
/// levels, replayed with the outer flag clear and set.
fn check_nested() {
    let rig = Rig::new(ReplayOrder::Dependencies);
    // The warmup runs every body, so that their launches' info is cached.
    rig.arm(2);
    rig.set(&rig.outer, 1);
    let graph = rig
        .capture(|| {
            rig.client
                .if_flag(rig.stream, &rig.outer, || {
                    rig.client
                        .while_flag(rig.stream, &rig.flag, BOUND, || {
                            rig.add(&rig.x, &rig.ones)?;
                            rig.client
                                .if_flag(rig.stream, &rig.outer, || rig.add(&rig.y, &rig.twos))?;
                            rig.countdown()
                        })
                        .map(drop)
                })
                .map(drop)
        })
        .expect("the nested conditionals are recorded");
    assert_eq!(stub_int("cuStubConditionals"), 3);
    // The if's body: the loop's setter and the loop.
    let (kinds, edges) = conditional_body(0, 0);
    assert_eq!(kinds, [KERNEL, CONDITIONAL]);
    assert_eq!(edges, [(0, 1)]);
    for (outer, k, x, y) in [(0, 3, 0.0, 0.0), (1, 3, 3.0, 6.0), (1, 0, 0.0, 0.0)] {
        rig.arm(k);
        rig.set(&rig.outer, outer);
        rig.replay(&graph);
        assert_eq!(rig.value(&rig.x), x, "outer {outer}, k {k}");
        assert_eq!(rig.value(&rig.y), y, "outer {outer}, k {k}");
        let left = if outer == 0 { k } else { 0 };
        assert_eq!(rig.get(&rig.counter), left, "outer {outer}, k {k}");
    }
    println!("\n{DONE}");
}

#[test]
fn a_loop_nests_in_an_if_and_an_if_in_the_loop() {
    if in_child() {
        return check_nested();
    }
    in_stub(
        "a_loop_nests_in_an_if_and_an_if_in_the_loop",
        &stub_dir(None),
        &[],
    );
}

/// In the child: a loop's body of three independent launches keeps the
/// core's dependency graph (no edges between them), its closing setter
/// after all three; in chain order, the chain.
fn check_body_order(order: ReplayOrder) {
    let rig = Rig::new(order);
    rig.arm(2);
    let body = || {
        rig.add(&rig.x, &rig.ones)?;
        rig.add(&rig.y, &rig.twos)?;
        rig.countdown()
    };
    let graph = rig
        .capture(|| {
            rig.client
                .while_flag(rig.stream, &rig.flag, BOUND, body)
                .map(drop)
        })
        .expect("the loop is recorded");
    let (kinds, edges) = conditional_body(0, 0);
    // The launches' info was cached by the warmup: no copy in the body.
    assert_eq!(kinds, [KERNEL, KERNEL, KERNEL, KERNEL], "{kinds:?}");
    match order {
        ReplayOrder::Dependencies => assert_eq!(edges, [(0, 3), (1, 3), (2, 3)]),
        ReplayOrder::Chain => assert_eq!(edges, [(0, 1), (1, 2), (2, 3)]),
    }
    rig.arm(3);
    rig.replay(&graph);
    assert_eq!((rig.value(&rig.x), rig.value(&rig.y)), (3.0, 6.0));
    assert_eq!(rig.get(&rig.flag), 0);
    println!("\n{DONE}");
}

#[test]
fn a_bodys_dependency_graph_is_handed_through_to_its_body_graph() {
    if in_child() {
        return check_body_order(ReplayOrder::Dependencies);
    }
    in_stub(
        "a_bodys_dependency_graph_is_handed_through_to_its_body_graph",
        &stub_dir(None),
        &[],
    );
}

#[test]
fn a_body_in_chain_order_keeps_the_chain() {
    if in_child() {
        return check_body_order(ReplayOrder::Chain);
    }
    in_stub(
        "a_body_in_chain_order_keeps_the_chain",
        &stub_dir(None),
        &[],
    );
}

/// In the child: a body holding a copy of the caller's, which runs only
/// when the body does; an empty body, which a 12.4 driver gets the no-op
/// kernel in (it would hang on it, and on a body of an empty node) and a
/// 12.8 one does not.
fn check_copies_and_empty_bodies(version: u32) {
    let rig = Rig::new(ReplayOrder::Dependencies);
    let graph = rig
        .capture(|| {
            rig.client.if_flag(rig.stream, &rig.flag, || {
                rig.client.write_f32(&rig.x, &[5.0; N])
            })?;
            rig.client.if_flag(rig.stream, &rig.flag, || Ok(()))?;
            Ok(())
        })
        .expect("a body with a copy and an empty one are recorded");
    let (kinds, _) = conditional_body(0, 0);
    assert_eq!(kinds, [MEMCPY], "the caller's write");
    let (kinds, _) = conditional_body(1, 0);
    if version >= 12080 {
        assert_eq!(kinds, [], "an empty body, which this driver runs");
    } else {
        assert_eq!(kinds, [KERNEL], "the no-op where the driver would hang");
    }
    for (flag, x) in [(0, 0.0), (1, 5.0)] {
        let noops = stub_int("cuStubNoopsRun");
        rig.zero();
        rig.set(&rig.flag, flag);
        rig.replay(&graph);
        assert_eq!(rig.value(&rig.x), x, "flag {flag}");
        let ran = stub_int("cuStubNoopsRun") - noops;
        let expected = i32::from(version < 12080 && flag == 1);
        assert_eq!(ran, expected, "the no-op runs with its body, flag {flag}");
    }
    println!("\n{DONE}");
}

#[test]
fn a_body_holds_copies_and_an_empty_body_gets_a_no_op_kernel_before_12_8() {
    if in_child() {
        return check_copies_and_empty_bodies(12040);
    }
    in_stub(
        "a_body_holds_copies_and_an_empty_body_gets_a_no_op_kernel_before_12_8",
        &stub_dir(None),
        &[],
    );
}

#[test]
fn an_empty_body_stays_empty_from_12_8() {
    if in_child() {
        return check_copies_and_empty_bodies(12080);
    }
    in_stub(
        "an_empty_body_stays_empty_from_12_8",
        &stub_dir(None),
        &[("CUDA_STUB_DRIVER_VERSION", "12080")],
    );
}

/// In the child: the driver refuses the conditional node; the capture is
/// refused with its words, the stream captures again, with the same
/// conditional, and a graph holding one is instantiated anew, not updated
/// in place.
fn check_refused_node() {
    let rig = Rig::new(ReplayOrder::Dependencies);
    let body = || {
        rig.client
            .if_flag(rig.stream, &rig.flag, || rig.add(&rig.x, &rig.ones))
            .map(drop)
    };
    // The warmup runs the body, so that its launch's info is cached.
    rig.set(&rig.flag, 1);
    // CUDA_ERROR_NOT_SUPPORTED
    fail_next_add_node(801);
    let refused = rig.capture(body).expect_err("the node is refused");
    let words = refused.to_string();
    assert!(words.contains("open conditional"), "{words}");
    assert!(words.contains("CUDA_ERROR_NOT_SUPPORTED"), "{words}");
    let graph = rig.capture(body).expect("the stream captures again");
    for (flag, x) in [(1, 1.0), (0, 0.0)] {
        rig.zero();
        rig.set(&rig.flag, flag);
        rig.replay(&graph);
        assert_eq!(rig.value(&rig.x), x, "flag {flag}");
    }
    let in_place = stub_int("cuStubUpdatesInPlace");
    let (update, ()) = rig
        .client
        .recapture(&graph, |_pass: Pass| body())
        .expect("the graph is captured again");
    assert_eq!(update, Update::Reinstantiated);
    assert_eq!(stub_int("cuStubUpdatesInPlace"), in_place);
    rig.zero();
    rig.set(&rig.flag, 1);
    rig.replay(&graph);
    assert_eq!(rig.value(&rig.x), 1.0);
    println!("\n{DONE}");
}

#[test]
fn a_refused_node_leaves_the_stream_able_to_capture_again() {
    if in_child() {
        return check_refused_node();
    }
    in_stub(
        "a_refused_node_leaves_the_stream_able_to_capture_again",
        &stub_dir(None),
        &[],
    );
}

/// In the child: a body's capture is invalidated (as a context-wide sync
/// during the window does) and the driver frees its graph; the window is
/// refused saying so, the stream's own capture is abandoned rather than
/// ended or destroyed (either crashes the driver, and the stub), and the
/// stream, replaced, runs and captures again.
fn check_invalidated_body() {
    let rig = Rig::new(ReplayOrder::Dependencies);
    let body = || {
        rig.client
            .if_flag(rig.stream, &rig.flag, || rig.add(&rig.x, &rig.ones))
            .map(drop)
    };
    rig.set(&rig.flag, 1);
    let refused = rig
        .capture(body)
        .expect_err("the body's capture was invalidated");
    let words = refused.to_string();
    assert!(
        words.contains("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
        "{words}"
    );
    assert!(words.contains("abandoned"), "{words}");
    rig.zero();
    rig.add(&rig.x, &rig.ones)
        .expect("the replaced stream runs work");
    assert_eq!(rig.value(&rig.x), 1.0);
    let graph = rig.capture(body).expect("the stream captures again");
    for (flag, x) in [(1, 1.0), (0, 0.0)] {
        rig.zero();
        rig.set(&rig.flag, flag);
        rig.replay(&graph);
        assert_eq!(rig.value(&rig.x), x, "flag {flag}");
    }
    drop(graph);
    rig.client
        .destroy_stream(rig.stream)
        .expect("the stream goes, the abandoned one left alone");
    println!("\n{DONE}");
}

#[test]
fn an_invalidated_body_abandons_the_capture_instead_of_ending_it() {
    if in_child() {
        return check_invalidated_body();
    }
    in_stub(
        "an_invalidated_body_abandons_the_capture_instead_of_ending_it",
        &stub_dir(None),
        &[("CUDA_STUB_INVALIDATE_BODY", "1")],
    );
}

/// In the child: recording a loop is refused with `Error::NoConditionals`
/// whose reason holds each of `words`; the eager loop still runs, and so
/// does a capture without a conditional.
fn check_refused(words: &[&str]) {
    let rig = Rig::new(ReplayOrder::Dependencies);
    rig.arm(2);
    let refused = rig
        .capture(|| rig.counted_loop(BOUND).map(drop))
        .expect_err("the loop cannot be recorded");
    let Error::NoConditionals { backend, reason } = refused.root() else {
        panic!("another refusal: {refused}");
    };
    assert_eq!(*backend, "cuda");
    for word in words {
        assert!(reason.contains(word), "{reason:?} lacks {word:?}");
    }
    println!("refused: {reason}");
    rig.arm(3);
    let ran = rig.counted_loop(BOUND).expect("the eager loop runs");
    assert_eq!(
        ran,
        Ran::Loop {
            iterations: 3,
            bound_reached: false
        }
    );
    assert_eq!(rig.value(&rig.x), 3.0);
    let graph = rig
        .capture(|| rig.add(&rig.x, &rig.ones))
        .expect("a capture without conditionals");
    rig.zero();
    rig.replay(&graph);
    assert_eq!(rig.value(&rig.x), 1.0);
    println!("\n{DONE}");
}

#[test]
fn a_driver_without_the_conditional_functions_is_refused_by_name() {
    if in_child() {
        return check_refused(&["lacks cuGraphConditionalHandleCreate", "12.4 or newer"]);
    }
    in_stub(
        "a_driver_without_the_conditional_functions_is_refused_by_name",
        &stub_dir(Some("no-conditionals")),
        &[],
    );
}

#[test]
fn a_driver_before_12_4_is_refused_with_the_version_it_needs() {
    if in_child() {
        return check_refused(&["CUDA driver 12.3", "driver 12.4 or newer"]);
    }
    in_stub(
        "a_driver_before_12_4_is_refused_with_the_version_it_needs",
        &stub_dir(None),
        &[("CUDA_STUB_DRIVER_VERSION", "12030")],
    );
}

#[test]
fn a_driver_refusing_the_setter_module_is_refused_with_its_words() {
    if in_child() {
        check_refused(&[
            "setter kernels",
            "cudaGraphSetConditional",
            "CUDA_ERROR_INVALID_PTX",
        ]);
        assert_eq!(stub_int("cuStubSetterLoads"), 0);
        return;
    }
    in_stub(
        "a_driver_refusing_the_setter_module_is_refused_with_its_words",
        &stub_dir(None),
        // CUDA_ERROR_INVALID_PTX
        &[("CUDA_STUB_SETTER_RESULT", "218")],
    );
}

/// In the child: info bytes first met inside one body are staged by a copy
/// the driver skips with that body, so a second body passing the same
/// bytes stages its own: each replays what its flag says, whichever ran.
fn check_info_first_met_in_a_skipped_body() {
    let rig = Rig::new(ReplayOrder::Dependencies);
    let fill = stub_kernel(rig.client.device(), "fill", Builtin::Fill.signature());
    let fill_with = |to: &Buffer, value: f32| {
        let info = BuiltinInfo::new(N as u32, value).to_bytes();
        rig.client
            .launch(rig.stream, &fill, [1, 1, 1], &[to], &info, &[])
    };
    let (graph, ()) = rig
        .client
        .capture(rig.stream, |pass| match pass {
            // Other info in the warmup, which keeps room for new info.
            Pass::Warmup => {
                fill_with(&rig.x, 1.0)?;
                fill_with(&rig.y, 2.0)
            }
            Pass::Record => {
                rig.client
                    .if_flag(rig.stream, &rig.flag, || fill_with(&rig.x, 3.5))?;
                rig.client
                    .if_flag(rig.stream, &rig.outer, || fill_with(&rig.y, 3.5))?;
                Ok(())
            }
        })
        .expect("the conditionals are recorded");
    for (first, second) in [(0, 1), (1, 0), (1, 1), (0, 0)] {
        rig.zero();
        rig.set(&rig.flag, first);
        rig.set(&rig.outer, second);
        rig.replay(&graph);
        let want = |set: u32| if set != 0 { 3.5 } else { 0.0 };
        assert_eq!(rig.value(&rig.x), want(first), "flags {first}, {second}");
        assert_eq!(rig.value(&rig.y), want(second), "flags {first}, {second}");
    }
    drop(graph);
    println!("\n{DONE}");
}

#[test]
fn info_first_met_in_a_skipped_body_is_staged_again_in_the_next() {
    if in_child() {
        return check_info_first_met_in_a_skipped_body();
    }
    in_stub(
        "info_first_met_in_a_skipped_body_is_staged_again_in_the_next",
        &stub_dir(None),
        &[("CUDA_STUB_DRIVER_VERSION", "12080")],
    );
}
