//! Graphs that follow a changing workload (rule 18): re-capture into an
//! existing graph, in place or by a new executable, refused updates that
//! leave the old graph, the keyed cache, and the picture of a graph.

use std::collections::BTreeSet;
use std::time::Duration;

use graph_capture::{Builtin, Error, GraphCache, Pass, Served, Update};

use crate::ensure;
use crate::faulty::Primitive;
use crate::session::Session;
use crate::support::{
    Fixture, N, NU, Outcome, Step, back_to, expect_all, expect_claimed, in_use, refused, usable,
};
use crate::workload::UserKernels;

/// A re-capture with the same kernels in the same order lands in the same
/// graph: the same handle replays the new work. A backend whose in-place
/// update pays updates in place; Vulkan swaps in a new executable. Either
/// way the report says which, and the graph's counters agree.
pub fn rule_18_recapture_in_place_gives_the_new_results<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let two = client.create_f32(stream, &[2.0; NU]).step("two")?;
    let graph = fx.capture_add()?;
    let graphs = client.live_graphs();
    client.replay(&graph).step("replay")?;
    fx.expect_x(2.0, "warmup and a replay of x += 1")?;
    // Same kernel, another input buffer: x += 2.
    let (how, ()) = client
        .recapture(&graph, |_| {
            client.run_builtin(stream, Builtin::Add, &[&fx.x, &two], N, 0.0)
        })
        .step("recapture")?;
    ensure!(
        client.live_graphs() == graphs,
        "the same graph, not a new one"
    );
    fx.expect_x(4.0, "the re-capture's warmup ran once")?;
    graph.replay().step("replay the updated graph")?;
    fx.expect_x(6.0, "a replay adds 2 now")?;
    let info = client.graph_info(&graph).step("info")?;
    let counted = match how {
        Update::InPlace => (1, 0),
        Update::Reinstantiated => (0, 1),
    };
    ensure!(
        (info.updates_in_place, info.reinstantiations) == counted && info.replays == 2,
        "updated {how:?}, counted {info:?}"
    );
    usable(client, stream)
}

/// A re-capture of other work (more launches) still lands in the same
/// graph, as a new executable behind the same handle, and every backend
/// reports it so.
pub fn rule_18_recapture_with_another_shape_reinstantiates<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let graph = fx.capture_add()?;
    let (how, ()) = client
        .recapture(&graph, |_| {
            fx.add()?;
            fx.add()?;
            client.run_builtin(stream, Builtin::Fill, &[&fx.one], N, 1.0)
        })
        .step("recapture")?;
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        how == Update::Reinstantiated && info.reinstantiations == 1 && info.updates_in_place == 0,
        "another shape reported {how:?}, counted {info:?}"
    );
    fx.expect_x(3.0, "the first warmup and the second's two adds")?;
    for _ in 0..3 {
        client.replay(&graph).step("replay")?;
    }
    fx.expect_x(9.0, "each replay adds two")?;
    ensure!(
        client.graph_info(&graph).step("info")?.launches == 3,
        "the graph holds the new recording"
    );
    drop(graph);
    ensure!(client.live_graphs() == 0, "one graph, destroyed once");
    usable(client, stream)
}

/// Whatever primitive refuses during a re-capture, the old graph is left
/// replayable with its old work, and no buffer is claimed for it.
pub fn rule_18_a_refused_update_leaves_the_old_graph<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let fx = Fixture::new(client)?;
    let (client, stream) = (&fx.client, fx.stream);
    let graph = fx.capture_add()?;
    for (primitive, same_shape) in [
        (Primitive::Update, true),
        (Primitive::Begin, true),
        (Primitive::Launch, true),
        (Primitive::Allocate, false),
        (Primitive::Instantiate, false),
    ] {
        plan.disarm();
        plan.fail(primitive, 1);
        let injected = plan.injected();
        let result = client.recapture(&graph, |_| {
            if same_shape {
                fx.add()
            } else {
                // A new intermediate: its page is what Allocate refuses.
                let tmp = client.allocate(stream, 64 << 20)?;
                fx.add()?;
                client.run_builtin(stream, Builtin::Fill, &[&tmp], N, 0.0)
            }
        });
        plan.disarm();
        let fired = plan.injected() > injected;
        match result {
            Err(_) if fired => {}
            // Every backend instantiates a recording of another shape.
            Ok(how) if !fired && primitive == Primitive::Instantiate => {
                return Err(format!(
                    "another shape updated {how:?} without instantiating"
                ));
            }
            Ok(_) if !fired => {}
            Ok(how) => {
                return Err(format!(
                    "{primitive:?}: an injected fault still updated ({how:?})"
                ));
            }
            Err(err) => return Err(format!("{primitive:?}: refused without the fault: {err}")),
        }
        // Whatever the warmup ran for real stays counted. A launch refused
        // in the warmup ran eagerly and claims what it wrote, as any eager
        // launch does (rule 9); the update itself claims nothing.
        let mut want = match client.read_f32(&fx.x) {
            Ok(x) => x[0],
            Err(Error::Claimed { .. }) if primitive == Primitive::Launch => {
                client.write_f32(&fx.x, &[0.0; NU]).step("rewrite x")?;
                0.0
            }
            Err(err) => return Err(format!("{primitive:?}: read x: {err}")),
        };
        ensure!(
            client.claimed_buffers() == 0,
            "{primitive:?}: a refused update claims nothing"
        );
        client.replay(&graph).step("the old graph replays")?;
        want += 1.0;
        fx.expect_x(want, &format!("{primitive:?}: the old graph adds one"))?;
        ensure!(
            client.graph_info(&graph).step("info")?.launches == 1,
            "{primitive:?}: the graph still holds the old recording"
        );
    }
    ensure!(client.live_graphs() == 1, "still one graph");
    usable(client, stream)
}

/// A body that launches its work and then fails in the recorded run seals
/// nothing: `capture` makes no graph, `recapture` and the cache leave the
/// old graph replaying its old work, and what the failed run would have
/// written is claimed by its error until a run writes it.
pub fn a_failed_body_seals_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream, x) = (&fx.client, fx.stream, &fx.x);
    let failing = |value: f32| {
        move |pass: Pass| {
            client.run_builtin(stream, Builtin::Fill, &[x], N, value)?;
            match pass {
                Pass::Warmup => Ok(()),
                Pass::Record => Err(Error::BadLaunch("the body's own error".into())),
            }
        }
    };
    let own = |result: Result<(), Error>, what: &str| -> Outcome {
        let err = refused(result, what)?;
        ensure!(
            err.to_string().contains("the body's own error"),
            "{what}: refused with {err}, not the body's error"
        );
        Ok(())
    };
    own(
        client.capture(stream, failing(5.0)).map(drop),
        "a failed capture",
    )?;
    ensure!(client.live_graphs() == 0, "a failed capture made a graph");
    expect_claimed(
        client,
        &fx.x,
        "the body's own error",
        "after a failed capture",
    )?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Fill, &[&fx.x], N, 1.0)
        })
        .step("capture")?;
    for round in 0..2 {
        own(
            client.recapture(&graph, failing(2.0)).map(drop),
            "a failed recapture",
        )?;
        expect_claimed(
            client,
            &fx.x,
            "the body's own error",
            "after a failed recapture",
        )?;
        client
            .replay(&graph)
            .step("replay after a failed recapture")?;
        fx.expect_x(
            1.0,
            &format!("round {round}: the old graph's work, not the failed run's"),
        )?;
    }
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        info.updates_in_place == 0 && info.reinstantiations == 0,
        "a failed recapture counted as an update: {info:?}"
    );
    drop(graph);
    let mut cache = GraphCache::new(client, stream, 4, None);
    let fill =
        |value: f32| move |_: Pass| client.run_builtin(stream, Builtin::Fill, &[x], N, value);
    ensure!(
        cache.run(7, 1, fill(3.0)).step("miss")? == Served::Miss,
        "first run is a miss"
    );
    own(
        cache.run(7, 2, failing(4.0)).map(drop),
        "a failed recapture in the cache",
    )?;
    ensure!(
        cache.run(7, 1, fill(3.0)).step("hit")? == Served::Hit,
        "the old key still hits"
    );
    fx.expect_x(3.0, "the cache replays the old graph")?;
    own(
        cache.run(7, 2, failing(4.0)).map(drop),
        "the failed key again",
    )?;
    ensure!(
        cache.stats().updates_in_place == 0 && cache.stats().reinstantiations == 0,
        "{:?}",
        cache.stats()
    );
    usable(client, stream)
}

/// What the old recording pinned waits for the replays enqueued before the
/// update, then goes back to the pool: usage returns to one graph's worth.
pub fn rule_18_old_pins_are_released_after_the_old_replays<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let baseline = in_use(client, stream)?;
    // A graph through an intermediate it pins after the body drops it.
    let (graph, ()) = client
        .capture(stream, |_| fx.add_through_intermediate().map(drop))
        .step("capture")?;
    let pinned = in_use(client, stream)?;
    ensure!(pinned.0 > baseline.0, "the graph pins its intermediate");
    for _ in 0..20 {
        client.replay(&graph).step("replay")?;
    }
    // Re-capture through a new intermediate while those replays may run.
    client
        .recapture(&graph, |_| fx.add_through_intermediate().map(drop))
        .step("recapture")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.pending_drops > 0,
        "the old intermediate waits in the drop queue for the old replays"
    );
    client.replay(&graph).step("replay the new recording")?;
    fx.expect_x(23.0, "two warmups, twenty old and one new replay")?;
    back_to(client, stream, pinned, "one graph's worth again")?;
    drop(graph);
    back_to(client, stream, baseline, "no graph")
}

/// The cache: a miss captures, a hit replays, a changed fingerprint
/// updates, capacity and idle time evict the least recently used.
pub fn graph_cache_counts_and_evicts<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let mut cache = GraphCache::<u32, D>::new(client, stream, 2, None);
    let (x, one) = (&fx.x, &fx.one);
    let step = |n: u32| move |_| client.run_builtin(stream, Builtin::Add, &[x, one], n, 0.0);
    let served: Vec<Served> = [
        cache.run(10, 0, step(10)),
        cache.run(10, 0, step(10)),
        cache.run(20, 0, step(20)),
        cache.run(10, 1, step(10)),
        cache.run(20, 0, step(20)),
        cache.run(30, 0, step(30)),
        cache.run(10, 1, step(10)),
    ]
    .into_iter()
    .collect::<Result<_, Error>>()
    .step("cache run")?;
    use Served::*;
    // The changed fingerprint updates as the backend updates (see rule 18's
    // in-place scenario); the counters agree with what was served.
    let updated = served[3];
    let counted = match updated {
        UpdatedInPlace => (1, 0),
        _ => (0, 1),
    };
    ensure!(
        served == [Miss, Hit, Miss, updated, Hit, Miss, Miss]
            && matches!(updated, UpdatedInPlace | Reinstantiated),
        "served {served:?}"
    );
    let stats = cache.stats();
    ensure!(
        (
            stats.hits,
            stats.misses,
            (stats.updates_in_place, stats.reinstantiations),
            stats.evictions
        ) == (2, 4, counted, 2),
        "{stats:?}"
    );
    ensure!(
        cache.len() == 2 && client.live_graphs() == 2,
        "two graphs cached"
    );
    // Element counts covered: every call added one to the first n elements.
    let x = client.read_f32(&fx.x).step("read x")?;
    ensure!(
        (x[0], x[15], x[25], x[35]) == (7.0, 3.0, 1.0, 0.0),
        "x[0], x[15], x[25], x[35] = {}, {}, {}, {}",
        x[0],
        x[15],
        x[25],
        x[35]
    );
    let mut idle = GraphCache::<u32, D>::new(client, stream, 8, Some(Duration::ZERO));
    idle.run(1, 0, step(1)).step("idle cache")?;
    std::thread::sleep(Duration::from_millis(2));
    idle.evict_idle();
    ensure!(
        idle.is_empty() && idle.stats().evictions == 1,
        "idle entries go"
    );
    drop(cache);
    drop(idle);
    ensure!(
        client.live_graphs() == 0,
        "evicted and dropped graphs are destroyed"
    );
    usable(client, stream)
}

/// A graph drawn as DOT: a node per recorded operation and exactly the
/// edges of its dependency graph (the hazards its declared accesses imply,
/// less those another path implies); Graphviz accepts it where installed.
pub fn a_graph_draws_its_dependencies<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let a = client.create_f32(stream, &[0.0; NU]).step("a")?;
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            // 0: a = 1   1: b = 2   (independent)
            client.run_builtin(stream, Builtin::Fill, &[&a], N, 1.0)?;
            client.run_builtin(stream, Builtin::Fill, &[&b], N, 2.0)?;
            // 2: a += b  (after both)
            client.run_builtin(stream, Builtin::Add, &[&a, &b], N, 0.0)?;
            // 3: x = a   (after 2)
            client.run_builtin(stream, Builtin::Copy, &[&a, &fx.x], N, 0.0)?;
            // 4: a = 0   (after 3 read it; that 2 wrote it before is
            // implied through 3)
            client.run_builtin(stream, Builtin::Fill, &[&a], N, 0.0)
        })
        .step("capture")?;
    let dot = client.graph_dot(&graph).step("dot")?;
    let (nodes, edges) = parse_dot(&dot)?;
    ensure!(nodes == 5, "{nodes} nodes in\n{dot}");
    let want: BTreeSet<(usize, usize, String)> =
        [(0, 2, "RAW"), (1, 2, "RAW"), (2, 3, "RAW"), (3, 4, "WAR")]
            .into_iter()
            .map(|(f, t, k)| (f, t, k.to_string()))
            .collect();
    ensure!(edges == want, "edges {edges:?}, expected {want:?}\n{dot}");
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        (info.edges, info.depth, info.width) == (4, 4, 2),
        "edges, depth and width {:?}",
        (info.edges, info.depth, info.width)
    );
    if let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(dot.as_bytes())
                .map_err(|e| format!("feeding dot: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("running dot: {e}"))?;
        ensure!(
            out.status.success(),
            "Graphviz refused the DOT: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = DOT_TO
        .get()
        .cloned()
        .or_else(|| std::env::var_os(DOT_DIR).map(std::path::PathBuf::from));
    if let Some(dir) = dir {
        let path = dir.join(format!("{}-dependencies.dot", D::NAME));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        std::fs::write(&path, &dot).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let info = client.graph_info(&graph).step("info")?;
    ensure!(info.launches == 5 && info.copies == 0, "{info:?}");
    ensure!(
        info.device_bytes >= 3 * u64::from(N) * 4 && info.touched_bytes <= info.device_bytes,
        "{info:?}"
    );
    Ok(())
}

/// Where the scenarios write the DOT of their graphs, when set.
pub const DOT_DIR: &str = "CONFORMANCE_DOT_DIR";

static DOT_TO: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Write the DOT of the scenarios' graphs into `dir` (the runner's
/// `--dot DIR`; the first call wins).
pub fn write_dot_to(dir: std::path::PathBuf) {
    let _ = DOT_TO.set(dir);
}

/// `(from, to, kind)` of each edge of a DOT text.
type Edges = BTreeSet<(usize, usize, String)>;

/// The node count and the `(from, to, kind)` edges of a DOT text of the
/// form `graph_dot` writes, checked line by line.
fn parse_dot(dot: &str) -> Result<(usize, Edges), String> {
    let mut lines = dot.lines();
    let first = lines.next().unwrap_or_default();
    ensure!(
        first.starts_with("digraph \"") && first.ends_with('{'),
        "header {first:?}"
    );
    let mut nodes = 0;
    let mut edges = BTreeSet::new();
    let mut closed = false;
    for line in lines {
        let line = line.trim();
        if line == "}" {
            closed = true;
            continue;
        }
        ensure!(!closed, "text after the closing brace");
        if line.starts_with("rankdir") || line.starts_with("node ") {
            continue;
        }
        let Some(id) = line.strip_prefix('n') else {
            return Err(format!("unexpected line {line:?}"));
        };
        let number = |s: &str| {
            s.trim_start_matches('n')
                .parse::<usize>()
                .map_err(|e| format!("{line:?}: {e}"))
        };
        if let Some((from, rest)) = id.split_once(" -> ") {
            let (to, attrs) = rest.split_once(' ').ok_or(format!("edge {line:?}"))?;
            let label = attrs
                .strip_prefix("[label=\"")
                .and_then(|a| a.split_once(' '))
                .map(|(kind, _)| kind.to_string())
                .ok_or(format!("edge label {line:?}"))?;
            edges.insert((number(from)?, number(to)?, label));
        } else {
            let (n, attrs) = id.split_once(' ').ok_or(format!("node {line:?}"))?;
            ensure!(number(n)? == nodes, "nodes out of order at {line:?}");
            ensure!(
                attrs.starts_with("[label=\"") && attrs.ends_with("];"),
                "node {line:?}"
            );
            nodes += 1;
        }
    }
    ensure!(closed, "no closing brace");
    Ok((nodes, edges))
}

/// Two clients on two devices of one backend, in one process, where the
/// machine has two: each computes on its own, and each refuses the other's
/// buffers and graphs.
pub fn two_clients_on_two_devices<D: UserKernels>(session: &Session<D>) -> Outcome {
    let devices = D::devices().map_err(|e| format!("devices: {e}"))?;
    let openable: Vec<_> = (0..devices.len())
        .filter_map(|i| D::open_index(i).ok().map(|device| (i, device)))
        .take(2)
        .collect();
    let [(i, first), (j, second)] = <[_; 2]>::try_from(openable).unwrap_or_else(|v| {
        // One device here: the scenario checks that one alone.
        let mut v = v.into_iter();
        match v.next() {
            Some(only) => [only.clone(), only],
            None => unreachable!("a session's device opened"),
        }
    });
    ensure!(
        devices[i].index == i && devices[j].index == j,
        "devices() numbers its entries by index"
    );
    let a = Session::<D>::keeping(first, session.order()).client();
    let b = Session::<D>::keeping(second, session.order()).client();
    let (sa, sb) = (
        a.create_stream().step("stream a")?,
        b.create_stream().step("stream b")?,
    );
    let xa = a.create_f32(sa, &[1.0; NU]).step("xa")?;
    let xb = b.create_f32(sb, &[5.0; NU]).step("xb")?;
    let (ga, ()) = a
        .capture(sa, |_| a.run_builtin(sa, Builtin::Fill, &[&xa], N, 3.0))
        .step("capture on a")?;
    a.replay(&ga).step("replay on a")?;
    let err = refused(b.replay(&ga), "a's graph on b")?;
    ensure!(matches!(err, Error::UnknownGraph(_)), "got {err}");
    let err = refused(b.read(&xa), "a's buffer on b")?;
    ensure!(matches!(err, Error::OtherClient(_)), "got {err}");
    let err = refused(
        a.run_builtin(sa, Builtin::Fill, &[&xb], N, 0.0),
        "b's buffer on a",
    )?;
    ensure!(matches!(err, Error::OtherClient(_)), "got {err}");
    b.run_builtin(
        sb,
        Builtin::Add,
        &[&xb, &b.create_f32(sb, &[1.0; NU]).step("one")?],
        N,
        0.0,
    )
    .step("add on b")?;
    expect_all(&a, &xa, 3.0, "a's buffer")?;
    expect_all(&b, &xb, 6.0, "b's buffer")?;
    usable(&a, sa)?;
    usable(&b, sb)
}
