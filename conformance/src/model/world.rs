//! A program run twice at once: on a backend through the public `Client`,
//! and on the model, plain Rust that states what each call means (the
//! bytes of every buffer, what is refused and with what, a window's fate,
//! the claims a failure leaves, when an imported page's keep-alive goes).
//! Each operation's answer and every read are compared; the first
//! disagreement ends the run.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use graph_capture::{
    Buffer, BufferId, Builtin, Client, Config, Driver, Error, GraphCache, GraphHandle, GraphId,
    Kernel, Pass, Ran, Served, StreamId,
};

use super::ops::{Cond, FOREIGN_FILL, Fault, Op, Part, Style, Target, Work};
use crate::faulty::{FaultPlan, Faulty, Primitive};
use crate::session::Session;
use crate::support::in_use;
use crate::workload::{UserKernels, Workload};

/// Floats in every buffer the programs make: two views of 64 (256 bytes,
/// the binding alignment) each.
pub const ELEMENTS: usize = 128;
const HALF: usize = ELEMENTS / 2;
/// Live streams, buffers and graphs a program keeps at most.
const MOST_STREAMS: usize = 4;
const MOST_BUFFERS: usize = 10;
const MOST_GRAPHS: usize = 5;

/// Where a program and the model parted, for a person.
pub type Disagreement = String;

/// A buffer bound by resolved work: its allocation and which bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bind {
    id: BufferId,
    part: Part,
}

impl Bind {
    fn range(self) -> std::ops::Range<usize> {
        match self.part {
            Part::Whole => 0..ELEMENTS,
            Part::Low => 0..HALF,
            Part::High => HALF..ELEMENTS,
        }
    }

    fn overlaps(self, other: Bind) -> bool {
        let (a, b) = (self.range(), other.range());
        self.id == other.id && a.start < b.end && b.start < a.end
    }
}

/// Work with its buffers resolved, as a graph keeps it.
#[derive(Debug, Clone)]
enum Resolved {
    Fill(Bind, f32),
    Add(Bind, Bind),
    Copy(Bind, Bind),
    Axpy(Bind, Bind, f32),
    Scale(Bind, f32, f32),
    Countdown { counter: BufferId, flag: BufferId },
    Write(BufferId, f32),
    SetFlag(BufferId, u32),
    Temporary(Bind, f32),
    Cond(Cond, BufferId, Vec<Vec<Resolved>>),
}

impl Resolved {
    /// Buffers read, and buffers written with whether all of each is.
    fn accesses(&self, reads: &mut Vec<BufferId>, writes: &mut Vec<(BufferId, bool)>) {
        let whole = |b: Bind| (b.id, b.part == Part::Whole);
        match self {
            Resolved::Fill(b, _) => writes.push(whole(*b)),
            Resolved::Add(x, y) => {
                reads.extend([x.id, y.id]);
                writes.push(whole(*x));
            }
            Resolved::Copy(src, dst) => {
                reads.push(src.id);
                writes.push(whole(*dst));
            }
            Resolved::Axpy(x, y, _) => {
                reads.extend([x.id, y.id]);
                writes.push(whole(*y));
            }
            Resolved::Scale(x, ..) | Resolved::Temporary(x, _) => {
                reads.push(x.id);
                writes.push(whole(*x));
            }
            Resolved::Countdown { counter, flag } => {
                reads.push(*counter);
                // The counter is bound whole, though only its first
                // element changes.
                writes.extend([(*counter, true), (*flag, true)]);
            }
            Resolved::Write(id, _) => writes.push((*id, true)),
            Resolved::SetFlag(id, _) => writes.push((*id, true)),
            Resolved::Cond(_, flag, bodies) => {
                reads.push(*flag);
                let mut inner = Vec::new();
                for r in bodies.iter().flatten() {
                    r.accesses(reads, &mut inner);
                }
                // A body may not run: its writes renew nothing.
                writes.extend(inner.into_iter().map(|(id, _)| (id, false)));
            }
        }
    }
}

/// Why a buffer holds no valid bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// A failure of anything but a replay.
    Other,
    /// A failed replay of this graph (which may retry over it).
    Replay(GraphId),
}

/// The model's view of one allocation.
#[derive(Debug, Clone)]
struct Mem {
    /// `None` where nothing wrote the element.
    values: Vec<Option<f32>>,
    claim: Option<Claim>,
    stream: StreamId,
    /// A flag: its `u32` (`values` unused).
    flag: Option<u32>,
}

/// What an operation is expected to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Ok,
    Refused,
    Claimed,
    Failed,
}

impl Expect {
    fn matches(self, got: &Result<(), Error>) -> bool {
        match (self, got) {
            (Expect::Ok, Ok(())) => true,
            (Expect::Claimed, Err(err)) => {
                matches!(err.root(), Error::Claimed { .. }) || matches!(err, Error::Claimed { .. })
            }
            (Expect::Refused | Expect::Failed, Err(_)) => true,
            _ => false,
        }
    }
}

/// An imported buffer's keep-alive and what must hold it.
struct Import {
    kept: Arc<()>,
    id: BufferId,
    owner: StreamId,
    /// The operation after which no handle and no graph held it.
    released: Option<u64>,
}

/// The model's state.
struct Model {
    mem: HashMap<BufferId, Mem>,
    /// The last host wait on each stream (a destroyed stream's destroy).
    waited: HashMap<StreamId, u64>,
    any_wait: u64,
    destroyed: HashSet<StreamId>,
    launch_fault: bool,
    replay_fault: bool,
    copies_in_bodies: bool,
    conditionals: bool,
    /// The streams whose work used each allocation.
    users: HashMap<BufferId, HashSet<StreamId>>,
    /// Upload failures injected per stream.
    upload_failures: HashMap<StreamId, usize>,
    /// The event primitive armed to fail for the eager work running.
    event_fault: Option<Primitive>,
}

/// A live buffer handle: `None` once work dropped it (swept after the
/// operation).
struct Live {
    handle: RefCell<Option<Buffer>>,
    id: BufferId,
    stream: StreamId,
}

impl Live {
    fn get(&self) -> Result<Buffer, Disagreement> {
        self.handle
            .borrow()
            .clone()
            .ok_or_else(|| format!("the model bound dropped {}", self.id))
    }

    fn alive(&self) -> bool {
        self.handle.borrow().is_some()
    }
}

/// A live stream and its two flags.
struct LiveStream {
    id: StreamId,
    flags: [(Buffer, BufferId); 2],
    /// The bytes its pools held once the flags were made (device, host).
    baseline: (u64, u64),
}

/// A world over backend `D`.
pub struct World<D: UserKernels> {
    client: Client<Faulty<D>>,
    /// A flag of another client, on the same device.
    foreign_flag: Buffer,
    /// Whether a window now recording was refused a call.
    doomed: std::cell::Cell<bool>,
    plan: Arc<FaultPlan>,
    kernels: Workload<Faulty<D>>,
    /// The foreign copy and fill, where the backend has foreign operations.
    foreign: Option<[Kernel<Faulty<D>>; 2]>,
    /// A foreign operation whose code fails, where the backend runs that
    /// code while recording (so its failure is a refused call, or inside a
    /// window a refused instantiate).
    foreign_fail: Option<Kernel<Faulty<D>>>,
    /// Whether the window now recording holds such an operation, so that
    /// making its graph will be refused.
    refuses_instantiate: std::cell::Cell<bool>,
    streams: Vec<LiveStream>,
    buffers: Vec<Live>,
    graphs: Vec<Graph<D>>,
    imports: Vec<Import>,
    model: RefCell<Model>,
    /// Whether work may bind any stream's buffers now.
    any_stream: std::cell::Cell<bool>,
    /// Buffers the recorded pass running drops at its end.
    dropping: RefCell<Vec<BufferId>>,
    /// Graphs work destroyed during the operation running.
    destroyed_graphs: RefCell<Vec<GraphId>>,
    /// The graph a re-capture running records into.
    recapturing: std::cell::Cell<Option<GraphId>>,
    /// Each stream's graph cache, and the model's view of its entries.
    caches: HashMap<StreamId, GraphCache<u8, Faulty<D>>>,
    cached: Vec<CachedGraph<D>>,
    /// Each cache's calls so far, as it orders its entries by last use.
    ticks: HashMap<StreamId, u64>,
    /// The operation running, counted from 1.
    at: u64,
    /// What the program did, counted per kind.
    pub kinds: HashSet<&'static str>,
}

/// A live graph and the work it recorded.
struct Graph<D: UserKernels> {
    handle: GraphHandle<Faulty<D>>,
    stream: StreamId,
    works: Vec<Resolved>,
    /// The work its last good capture ran.
    source: Vec<Work>,
}

/// A graph a stream's cache holds for a key.
struct CachedGraph<D: UserKernels> {
    key: u8,
    fingerprint: u8,
    /// The cache's call that last used it.
    tick: u64,
    graph: Graph<D>,
}

/// Where a graph the model knows lives.
#[derive(Debug, Clone, Copy)]
enum Which {
    /// `World::graphs`.
    Own(usize),
    /// `World::cached`.
    Cached(usize),
}

/// How a capture, a re-capture or a replay is asked for.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// Through the client (a replay by handle, or by id).
    Client { by_id: bool },
    /// Through the stream's `GraphCache`, with a key and a fingerprint.
    Cache(u8, u8),
}

/// Which armed faults a call fired.
#[derive(Debug, Clone, Copy, Default)]
struct Fired {
    begin: bool,
    instantiate: bool,
    update: bool,
    upload: bool,
}

impl Fired {
    /// Whether a fault that refuses the capture or update fired.
    fn refusing(self) -> bool {
        self.begin || self.instantiate || self.update
    }
}

/// The primitive behind a fault.
fn primitive(fault: Fault) -> Primitive {
    match fault {
        Fault::Begin => Primitive::Begin,
        Fault::Instantiate => Primitive::Instantiate,
        Fault::Update => Primitive::Update,
        Fault::Upload => Primitive::Upload,
    }
}

/// `a` and `b` are the same float: equal, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn err<T>(what: impl Into<String>) -> Result<T, Disagreement> {
    Err(what.into())
}

impl<D: UserKernels> World<D> {
    /// A world on `session`'s device, with one stream to start from. Its
    /// pools' first pages are large, so that no page is needed while a
    /// window records (which the rules refuse, and the model does not
    /// predict).
    pub fn new(session: &Session<D>) -> Result<Self, String> {
        let (client, plan) = session.faulty_with(Config {
            first_page_bytes: 4 << 20,
            device_page_bytes: 4 << 20,
            host_page_bytes: 4 << 20,
            ..Config::default()
        });
        let kernels = Workload::new(client.device()).map_err(|e| format!("kernels: {e}"))?;
        let foreign = foreign_ops::<D>(&client)?;
        let foreign_fail = failing_foreign_op::<D>(&client)?;
        let other = session.client();
        let foreign_flag = other
            .create_stream()
            .and_then(|s| other.create(s, &1u32.to_le_bytes()))
            .map_err(|e| format!("another client's flag: {e}"))?;
        let mut world = Self {
            client,
            foreign_flag,
            doomed: std::cell::Cell::new(false),
            plan,
            kernels,
            foreign,
            foreign_fail,
            refuses_instantiate: std::cell::Cell::new(false),
            streams: Vec::new(),
            buffers: Vec::new(),
            graphs: Vec::new(),
            imports: Vec::new(),
            model: RefCell::new(Model {
                mem: HashMap::new(),
                waited: HashMap::new(),
                any_wait: 0,
                destroyed: HashSet::new(),
                launch_fault: false,
                replay_fault: false,
                copies_in_bodies: false,
                conditionals: false,
                users: HashMap::new(),
                upload_failures: HashMap::new(),
                event_fault: None,
            }),
            any_stream: std::cell::Cell::new(false),
            dropping: RefCell::new(Vec::new()),
            destroyed_graphs: RefCell::new(Vec::new()),
            recapturing: std::cell::Cell::new(None),
            caches: HashMap::new(),
            cached: Vec::new(),
            ticks: HashMap::new(),
            at: 0,
            kinds: HashSet::new(),
        };
        world.add_stream(None)?;
        Ok(world)
    }

    /// The faults injected into this world's driver.
    pub fn faults(&self) -> &FaultPlan {
        &self.plan
    }

    fn add_stream(&mut self, raw: Option<<Faulty<D> as Driver>::Stream>) -> Result<(), String> {
        let id = match raw {
            Some(raw) => self.client.adopt_stream(raw),
            None => self.client.create_stream(),
        }
        .map_err(|e| format!("stream: {e}"))?;
        let flag = || {
            self.client
                .create(id, &0u32.to_le_bytes())
                .map_err(|e| format!("flag: {e}"))
        };
        let flags = [flag()?, flag()?].map(|f| {
            let id = f.id();
            (f, id)
        });
        let bodies = self.client.conditionals(id);
        let mut model = self.model.borrow_mut();
        model.conditionals = bodies.is_ok();
        model.copies_in_bodies = bodies.is_ok_and(|b| b.copies);
        for (_, flag) in &flags {
            model.mem.insert(
                *flag,
                Mem {
                    values: Vec::new(),
                    claim: None,
                    stream: id,
                    flag: Some(0),
                },
            );
        }
        drop(model);
        let baseline = in_use(&self.client, id)?;
        self.streams.push(LiveStream {
            id,
            flags,
            baseline,
        });
        Ok(())
    }

    fn stream(&self, index: u8) -> Option<usize> {
        (!self.streams.is_empty()).then(|| usize::from(index) % self.streams.len())
    }

    fn stream_index(&self, id: StreamId) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// The live buffer `index` picks among those `on` allows.
    fn buffer(&self, index: u8, on: Option<StreamId>) -> Option<usize> {
        let on = on.filter(|_| !self.any_stream.get());
        let candidates: Vec<usize> = (0..self.buffers.len())
            .filter(|&i| self.buffers[i].alive())
            .filter(|&i| on.is_none_or(|s| self.buffers[i].stream == s))
            .collect();
        (!candidates.is_empty()).then(|| candidates[usize::from(index) % candidates.len()])
    }

    fn bind(&self, target: Target, on: Option<StreamId>) -> Option<Bind> {
        let at = self.buffer(target.buffer, on)?;
        Some(Bind {
            id: self.buffers[at].id,
            part: target.part,
        })
    }

    /// The handle of `bind`'s buffer, or a view of its half.
    fn handle(&self, bind: Bind) -> Result<Buffer, Error> {
        let lost = || Error::BadLaunch("the model lost a buffer".into());
        let live = self
            .buffers
            .iter()
            .find(|b| b.id == bind.id)
            .ok_or_else(lost)?;
        let handle = live.get().map_err(|_| lost())?;
        let half = (HALF * 4) as u64;
        match bind.part {
            Part::Whole => Ok(handle),
            Part::Low => handle.range(0, half),
            Part::High => handle.range(half, half),
        }
    }

    /// Run one operation on both sides; the disagreement, if any.
    pub fn step(&mut self, op: &Op) -> Result<(), Disagreement> {
        self.at += 1;
        let mut kinds = Vec::new();
        op.kinds(&mut kinds);
        self.kinds.extend(kinds);
        match op {
            Op::CreateStream => {
                if self.streams.len() < MOST_STREAMS {
                    self.add_stream(None)?;
                }
            }
            Op::AdoptStream => {
                if self.streams.len() < MOST_STREAMS {
                    let raw = <Faulty<D> as Driver>::create_stream(self.client.device())
                        .map_err(|e| format!("raw stream: {e}"))?;
                    self.add_stream(Some(raw))?;
                }
            }
            Op::DestroyStream(s) => {
                if self.streams.len() > 1
                    && let Some(s) = self.stream(*s)
                {
                    self.destroy_stream(s)?;
                }
            }
            Op::Allocate(s) => {
                if let Some(s) = self.stream(*s)
                    && self.buffers.len() < MOST_BUFFERS
                {
                    let id = self.streams[s].id;
                    let handle = self
                        .client
                        .allocate(id, (ELEMENTS * 4) as u64)
                        .map_err(|e| format!("allocate: {e}"))?;
                    self.track(handle, id, vec![None; ELEMENTS]);
                }
            }
            Op::Create(s, v) => {
                if let Some(s) = self.stream(*s)
                    && self.buffers.len() < MOST_BUFFERS
                {
                    let id = self.streams[s].id;
                    let handle = self
                        .client
                        .create_f32(id, &[*v; ELEMENTS])
                        .map_err(|e| format!("create: {e}"))?;
                    self.track(handle, id, vec![Some(*v); ELEMENTS]);
                }
            }
            Op::Import(s, v) => self.import(*s, *v)?,
            Op::DropBuffer(b) => {
                if let Some(at) = self.buffer(*b, None) {
                    let live = self.buffers.remove(at);
                    drop(live.handle);
                    self.released_maybe(live.id);
                }
            }
            Op::Write(b, v) => {
                if let Some(at) = self.buffer(*b, None) {
                    let id = self.buffers[at].id;
                    let got = self
                        .client
                        .write_f32(&self.buffers[at].get()?, &[*v; ELEMENTS]);
                    let mut model = self.model.borrow_mut();
                    check("write", Expect::Ok, &got)?;
                    let mem = model.mem.get_mut(&id).ok_or("no memory")?;
                    mem.values = vec![Some(*v); ELEMENTS];
                    mem.claim = None;
                }
            }
            Op::WriteWrongSize(b) => {
                if let Some(at) = self.buffer(*b, None) {
                    let got = self.client.write_f32(&self.buffers[at].get()?, &[1.0; 3]);
                    check("write of the wrong size", Expect::Refused, &got)?;
                }
            }
            Op::Read(t) => self.read(*t)?,
            Op::Sync(s) => {
                if let Some(s) = self.stream(*s) {
                    let id = self.streams[s].id;
                    check("sync", Expect::Ok, &self.client.sync(id))?;
                    self.waited(id);
                }
            }
            Op::Trim(s) => {
                if let Some(s) = self.stream(*s) {
                    self.trim(s)?;
                }
            }
            Op::Usage(s) => {
                if let Some(s) = self.stream(*s) {
                    // A query changes nothing: the next one says the same.
                    let id = self.streams[s].id;
                    let first = self.client.usage(id).map_err(|e| format!("usage: {e}"))?;
                    let second = self.client.usage(id).map_err(|e| format!("usage: {e}"))?;
                    if first != second {
                        return err(format!(
                            "two usage queries disagree: {first:?}, then {second:?}"
                        ));
                    }
                    let graphs = self.graphs.len() + self.cached.len();
                    if self.client.live_graphs() != graphs {
                        return err(format!(
                            "{} live graphs, the model holds {graphs}",
                            self.client.live_graphs(),
                        ));
                    }
                    let failures = self.model.borrow().upload_failures.get(&id).copied();
                    if first.upload_failures != failures.unwrap_or(0) {
                        return err(format!(
                            "{} upload failures counted, the model injected {failures:?}",
                            first.upload_failures
                        ));
                    }
                }
            }
            Op::Wait(a, b) => {
                if let (Some(a), Some(b)) = (self.stream(*a), self.stream(*b)) {
                    let got = self.client.wait(self.streams[a].id, self.streams[b].id);
                    check("wait", Expect::Ok, &got)?;
                }
            }
            Op::Eager(s, work) => {
                if let Some(s) = self.stream(*s) {
                    let id = self.streams[s].id;
                    let mut recorded = Vec::new();
                    // Its answer was checked against the model's already.
                    let _answer = self.work(id, work, Mode::Eager, 0, &mut recorded)?;
                }
            }
            Op::Capture(s, style, works) => {
                if let Some(s) = self.stream(*s)
                    && self.graphs.len() < MOST_GRAPHS
                {
                    self.capture(s, *style, works)?;
                }
            }
            Op::Recapture(g, style, works) => {
                if !self.graphs.is_empty() {
                    let g = usize::from(*g) % self.graphs.len();
                    let via = Via::Client { by_id: false };
                    self.recapture(Which::Own(g), via, *style == Style::Failing, works)?;
                }
            }
            Op::RecaptureSame(g) => {
                if !self.graphs.is_empty() {
                    let g = usize::from(*g) % self.graphs.len();
                    let works = self.graphs[g].source.clone();
                    let via = Via::Client { by_id: false };
                    self.recapture(Which::Own(g), via, false, &works)?;
                }
            }
            Op::Replay(g) | Op::ReplayId(g) => {
                if !self.graphs.is_empty() {
                    let g = usize::from(*g) % self.graphs.len();
                    let by_id = matches!(op, Op::ReplayId(_));
                    self.replay(Which::Own(g), Via::Client { by_id })?;
                }
            }
            Op::DropGraph(g) | Op::Destroy(g) => {
                if !self.graphs.is_empty() {
                    let g = usize::from(*g) % self.graphs.len();
                    let graph = self.graphs.remove(g);
                    if matches!(op, Op::Destroy(_)) {
                        check("destroy", Expect::Ok, &self.client.destroy(&graph.handle))?;
                        if self.client.is_live(&graph.handle) {
                            return err("a destroyed graph is live");
                        }
                    }
                    let ids = graph_buffers(&graph.works);
                    drop(graph);
                    for id in ids {
                        self.released_maybe(id);
                    }
                }
            }
            Op::FailNextLaunch => {
                let mut model = self.model.borrow_mut();
                if !model.launch_fault {
                    model.launch_fault = true;
                    self.plan.fail(Primitive::Launch, 1);
                }
            }
            Op::Threads(a, b, first, second) => self.threads(*a, *b, first, second)?,
            Op::FailNextReplay => {
                let mut model = self.model.borrow_mut();
                if !model.replay_fault {
                    model.replay_fault = true;
                    self.plan.fail(Primitive::Replay, 1);
                }
            }
            Op::Cached(s, key, fingerprint, works) => {
                if let Some(s) = self.stream(*s) {
                    self.cached(s, *key, *fingerprint, works)?;
                }
            }
            Op::Conditionals(s) => {
                if let Some(s) = self.stream(*s) {
                    let (conditionals, copies) = {
                        let model = self.model.borrow();
                        (model.conditionals, model.copies_in_bodies)
                    };
                    match self.client.conditionals(self.streams[s].id) {
                        Ok(bodies) if conditionals && bodies.copies == copies => {}
                        Err(_) if !conditionals => {}
                        got => {
                            return err(format!(
                                "conditionals answered {got:?}, the model has them {conditionals} \
                                 with copies {copies}"
                            ));
                        }
                    }
                }
                if let Some(gone) = self.model.borrow().destroyed.iter().next()
                    && self.client.conditionals(*gone).is_ok()
                {
                    return err("a destroyed stream answered its conditionals");
                }
            }
            Op::ReloadKernels => {
                self.kernels =
                    Workload::new(self.client.device()).map_err(|e| format!("kernels: {e}"))?;
            }
            Op::FailNext(fault) => {
                if !self.plan.armed(primitive(*fault)) {
                    self.plan.fail(primitive(*fault), 1);
                }
            }
            Op::WriteFailing(b, v) => {
                if let Some(at) = self.buffer(*b, None)
                    && !self.plan.armed(Primitive::Copy)
                {
                    let id = self.buffers[at].id;
                    self.plan.fail(Primitive::Copy, 1);
                    let got = self
                        .client
                        .write_f32(&self.buffers[at].get()?, &[*v; ELEMENTS]);
                    let fired = !self.plan.armed(Primitive::Copy);
                    self.plan.disarm_only(Primitive::Copy);
                    if !fired {
                        return err("a write made no copy");
                    }
                    check("a write whose copy fails", Expect::Failed, &got)?;
                    if let Some(m) = self.model.borrow_mut().mem.get_mut(&id) {
                        m.claim = Some(Claim::Other);
                    }
                }
            }
            Op::SyncFailing(s) => {
                if let Some(s) = self.stream(*s)
                    && !self.plan.armed(Primitive::Fence)
                {
                    let id = self.streams[s].id;
                    self.plan.fail(Primitive::Fence, 1);
                    let got = self.client.sync(id);
                    let fired = !self.plan.armed(Primitive::Fence);
                    self.plan.disarm_only(Primitive::Fence);
                    if fired {
                        // Not a wait: nothing is known done.
                        check("a sync whose fence fails", Expect::Failed, &got)?;
                    } else {
                        check("a sync", Expect::Ok, &got)?;
                        self.waited(id);
                    }
                }
            }
            Op::EventFailing(s, wait, work) => {
                let primitive = if *wait {
                    Primitive::WaitEvent
                } else {
                    Primitive::RecordEvent
                };
                if let Some(s) = self.stream(*s)
                    && !self.plan.armed(primitive)
                    && !self.model.borrow().launch_fault
                {
                    let id = self.streams[s].id;
                    // The other stream writes what the work reads first, so
                    // that the work waits for it.
                    let other = self.streams[(s + 1) % self.streams.len()].id;
                    if let Some(read) = work.read_target()
                        && other != id
                    {
                        let fill = Work::Fill(read, 7.0);
                        let _answer = self.work(other, &fill, Mode::Eager, 0, &mut Vec::new())?;
                    }
                    self.plan.fail(primitive, 1);
                    self.model.borrow_mut().event_fault = Some(primitive);
                    let ran = self.work(id, work, Mode::Eager, 0, &mut Vec::new());
                    self.model.borrow_mut().event_fault = None;
                    let left = self.plan.armed(primitive);
                    self.plan.disarm_only(primitive);
                    let fired_outside = ran?.is_ok() && !left;
                    if fired_outside {
                        return err(format!("{primitive:?} failed, and the work succeeded"));
                    }
                }
            }
        }
        self.sweep_dropped()?;
        self.check_keep_alives()
    }

    /// Forget the buffers whose handles work dropped.
    fn sweep_dropped(&mut self) -> Result<(), Disagreement> {
        let destroyed = self.destroyed_graphs.take();
        let gone: Vec<Graph<D>> = self
            .graphs
            .extract_if(.., |g| destroyed.contains(&g.handle.id()))
            .collect();
        let mut dropped: Vec<BufferId> = self
            .buffers
            .extract_if(.., |b| !b.alive())
            .map(|b| b.id)
            .collect();
        for graph in gone {
            // Once the window closed, the deferred destroy ran.
            if self.client.is_live(&graph.handle) {
                return err(format!(
                    "{} destroyed in work is still live",
                    graph.handle.id()
                ));
            }
            dropped.extend(graph_buffers(&graph.works));
        }
        for id in dropped {
            self.released_maybe(id);
        }
        Ok(())
    }

    /// Drop the handles the recorded pass asked to drop.
    fn drop_pending(&self) {
        for id in self.dropping.take() {
            if let Some(live) = self.buffers.iter().find(|b| b.id == id) {
                drop(live.handle.take());
            }
        }
    }

    fn track(&mut self, handle: Buffer, stream: StreamId, values: Vec<Option<f32>>) {
        let id = handle.id();
        self.model.borrow_mut().mem.insert(
            id,
            Mem {
                values,
                claim: None,
                stream,
                flag: None,
            },
        );
        self.buffers.push(Live {
            handle: RefCell::new(Some(handle)),
            id,
            stream,
        });
    }

    fn import(&mut self, s: u8, v: f32) -> Result<(), Disagreement> {
        let Some(s) = self.stream(s) else {
            return Ok(());
        };
        if self.buffers.len() >= MOST_BUFFERS {
            return Ok(());
        }
        let stream = self.streams[s].id;
        let kept = Arc::new(());
        let bytes: Vec<u8> = [v; ELEMENTS].iter().flat_map(|x| x.to_le_bytes()).collect();
        let Some(page) = <Faulty<D>>::foreign_page(self.client.device(), &bytes, kept.clone())
        else {
            return Ok(());
        };
        let page = page.map_err(|e| format!("foreign page: {e}"))?;
        let handle = self
            .client
            .import(stream, page)
            .map_err(|r| format!("import: {}", r.error))?;
        let id = handle.id();
        self.imports.push(Import {
            kept,
            id,
            owner: stream,
            released: None,
        });
        self.track(handle, stream, vec![Some(v); ELEMENTS]);
        Ok(())
    }

    /// A host wait on `stream` just ended.
    fn waited(&self, stream: StreamId) {
        let mut model = self.model.borrow_mut();
        model.waited.insert(stream, self.at);
        model.any_wait = self.at;
    }

    /// Buffer `id` may have lost its last handle or graph.
    fn released_maybe(&mut self, id: BufferId) {
        let held = self.buffers.iter().any(|b| b.id == id && b.alive())
            || self
                .graphs
                .iter()
                .chain(self.cached.iter().map(|c| &c.graph))
                .any(|g| graph_buffers(&g.works).contains(&id));
        if let Some(import) = self.imports.iter_mut().find(|i| i.id == id)
            && !held
            && import.released.is_none()
        {
            import.released = Some(self.at);
        }
    }

    /// Every keep-alive is held while a handle or a graph holds its memory,
    /// and let go once every stream that used it waited past the release.
    fn check_keep_alives(&mut self) -> Result<(), Disagreement> {
        let model = self.model.borrow();
        for import in &self.imports {
            let held = Arc::strong_count(&import.kept) > 1;
            let Some(released) = import.released else {
                if !held {
                    return err(format!(
                        "the keep-alive of imported {} went while it was held",
                        import.id
                    ));
                }
                continue;
            };
            let past = |stream: &StreamId| {
                model.waited.get(stream).is_some_and(|&at| at > released)
                    || (model.destroyed.contains(stream) && model.any_wait > released)
            };
            let users = model.users.get(&import.id);
            if held && users.is_none_or(|u| u.iter().all(past)) && past(&import.owner) {
                return err(format!(
                    "the keep-alive of imported {} is still held after every stream that used \
                     it ({users:?}) waited past its release",
                    import.id
                ));
            }
        }
        Ok(())
    }

    /// `trim`; where the stream holds nothing any more (no buffer but its
    /// flags, no graph), every stream synced first, its pools are back
    /// where they were once its flags were made.
    fn trim(&mut self, s: usize) -> Result<(), Disagreement> {
        let id = self.streams[s].id;
        let quiet = !self.buffers.iter().any(|b| b.stream == id)
            && !self
                .graphs
                .iter()
                .chain(self.cached.iter().map(|c| &c.graph))
                .any(|g| g.stream == id);
        if quiet {
            for other in self.streams.iter().map(|s| s.id).collect::<Vec<_>>() {
                check("sync", Expect::Ok, &self.client.sync(other))?;
                self.waited(other);
            }
        }
        check("trim", Expect::Ok, &self.client.trim(id).map(drop))?;
        self.waited(id);
        if quiet {
            let now = in_use(&self.client, id)?;
            let baseline = self.streams[s].baseline;
            if now != baseline {
                return err(format!(
                    "{id} holds nothing but its flags, and after a trim its pools use \
                     {now:?} bytes (device, host), {baseline:?} when the flags were made"
                ));
            }
        }
        Ok(())
    }

    fn destroy_stream(&mut self, s: usize) -> Result<(), Disagreement> {
        let id = self.streams[s].id;
        check(
            "destroy stream",
            Expect::Ok,
            &self.client.destroy_stream(id),
        )?;
        self.streams.remove(s);
        let gone: Vec<BufferId> = self
            .buffers
            .iter()
            .filter(|b| b.stream == id)
            .map(|b| b.id)
            .collect();
        self.buffers.retain(|b| b.stream != id);
        let mut graphs: Vec<Graph<D>> = self.graphs.extract_if(.., |g| g.stream == id).collect();
        graphs.extend(
            self.cached
                .extract_if(.., |c| c.graph.stream == id)
                .map(|c| c.graph),
        );
        drop(self.caches.remove(&id));
        let mut pinned = Vec::new();
        for graph in graphs {
            pinned.extend(graph_buffers(&graph.works));
        }
        {
            let mut model = self.model.borrow_mut();
            model.destroyed.insert(id);
            model.waited.insert(id, self.at);
            model.any_wait = self.at;
        }
        for id in gone.into_iter().chain(pinned) {
            self.released_maybe(id);
        }
        Ok(())
    }

    fn read(&mut self, target: Target) -> Result<(), Disagreement> {
        let Some(bind) = self.bind(target, None) else {
            return Ok(());
        };
        let view = self.handle(bind).map_err(|e| format!("view: {e}"))?;
        let got = self.client.read_f32(&view);
        let model = self.model.borrow();
        let mem = model.mem.get(&bind.id).ok_or("no memory")?;
        let stream = mem.stream;
        match (&got, mem.claim) {
            (Err(Error::Claimed { .. }), Some(_)) => return Ok(()),
            (Err(e), None) => return err(format!("read of {} failed: {e}", bind.id)),
            (Ok(_), Some(claim)) => {
                return err(format!(
                    "read of {} gave bytes, the model has it claimed ({claim:?})",
                    bind.id
                ));
            }
            (Err(e), Some(_)) => return err(format!("read of {} failed otherwise: {e}", bind.id)),
            (Ok(values), None) => {
                for (i, (got, want)) in values.iter().zip(&mem.values[bind.range()]).enumerate() {
                    if let Some(want) = want
                        && !same(*got, *want)
                    {
                        return err(format!(
                            "read of {} {:?}: element {i} is {got}, the model says {want}",
                            bind.id, bind.part
                        ));
                    }
                }
            }
        }
        drop(model);
        self.waited(stream);
        Ok(())
    }
}

/// How work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Now, on the device and the model, on any stream's buffers.
    Eager,
    /// Now, as a capture's warmup: on the window's stream's buffers only.
    Warmup,
    /// Recorded: the model keeps it for the graph.
    Record,
}

/// Every buffer resolved work touches.
fn graph_buffers(works: &[Resolved]) -> HashSet<BufferId> {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for w in works {
        w.accesses(&mut reads, &mut writes);
    }
    reads
        .into_iter()
        .chain(writes.into_iter().map(|(id, _)| id))
        .collect()
}

fn check(what: &str, want: Expect, got: &Result<(), Error>) -> Result<(), Disagreement> {
    if want.matches(got) {
        Ok(())
    } else {
        err(format!(
            "{what}: the model expects {want:?}, the client answered {got:?}"
        ))
    }
}

impl<D: UserKernels> World<D> {
    /// Run `work` on `stream` in `mode`, `depth` conditionals deep: the
    /// call on the client, the model's expectation of its answer, and its
    /// effect (eagerly on the values, recorded into `recorded`). Returns
    /// the call's error, as the caller's body would.
    fn work(
        &self,
        stream: StreamId,
        work: &Work,
        mode: Mode,
        depth: u32,
        recorded: &mut Vec<Resolved>,
    ) -> Result<Result<(), Error>, Disagreement> {
        let got = self.work_once(stream, work, mode, depth, recorded)?;
        // Every call a recording stream refuses dooms its window, whether
        // or not the body goes on (rule 23).
        if mode == Mode::Record && got.is_err() {
            self.doomed.set(true);
        }
        Ok(got)
    }

    fn work_once(
        &self,
        stream: StreamId,
        work: &Work,
        mode: Mode,
        depth: u32,
        recorded: &mut Vec<Resolved>,
    ) -> Result<Result<(), Error>, Disagreement> {
        // Work inside a window binds the window's stream's buffers only.
        let on = (mode != Mode::Eager).then_some(stream);
        let c = &self.client;
        let launch = |reads: &[BufferId], writes: &[Bind], call: &dyn Fn() -> Result<(), Error>| {
            self.launch(stream, mode, reads, writes, call)
        };
        let got: Result<(), Error> = match work {
            Work::Fill(t, v) => {
                let Some(b) = self.bind(*t, on) else {
                    return Ok(Ok(()));
                };
                let h = self.handle(b).map_err(|e| e.to_string())?;
                let n = (b.range().len()) as u32;
                let got = launch(&[], &[b], &|| {
                    c.run_builtin(stream, Builtin::Fill, &[&h], n, *v)
                })?;
                if got.is_ok() {
                    self.effect(mode, Resolved::Fill(b, *v), recorded);
                }
                got
            }
            Work::Add(x, y) | Work::Copy(x, y) | Work::Axpy(x, y, _) => {
                let (Some(bx), Some(by)) = (self.bind(*x, on), self.bind(*y, on)) else {
                    return Ok(Ok(()));
                };
                let (hx, hy) = (
                    self.handle(bx).map_err(|e| e.to_string())?,
                    self.handle(by).map_err(|e| e.to_string())?,
                );
                let n = bx.range().len().min(by.range().len()) as u32;
                // What is read must be known, so that nothing unknown
                // spreads into a counter and so into a flag.
                let read_y = !matches!(work, Work::Copy(..));
                if !self.known(bx, n as usize) || (read_y && !self.known(by, n as usize)) {
                    return Ok(Ok(()));
                }
                let (which, written, resolved, scalar) = match work {
                    Work::Add(..) => (Builtin::Add, bx, Resolved::Add(bx, by), 0.0),
                    Work::Copy(..) => (Builtin::Copy, by, Resolved::Copy(bx, by), 0.0),
                    Work::Axpy(_, _, a) => (Builtin::Axpy, by, Resolved::Axpy(bx, by, *a), *a),
                    _ => unreachable!(),
                };
                let other = if written == bx { by } else { bx };
                if written.overlaps(other) {
                    // A written binding overlapping another: refused.
                    let got = c.run_builtin(stream, which, &[&hx, &hy], n, scalar);
                    check("an aliased launch", Expect::Refused, &got)?;
                    got
                } else {
                    let mut reads = vec![bx.id, by.id];
                    if matches!(work, Work::Copy(..)) {
                        reads = vec![bx.id];
                    }
                    let got = launch(&reads, &[written], &|| {
                        c.run_builtin(stream, which, &[&hx, &hy], n, scalar)
                    })?;
                    if got.is_ok() {
                        self.effect(mode, resolved, recorded);
                    }
                    got
                }
            }
            Work::ForeignCopy(x, y) => {
                let (Some([copy, _]), Some(bx), Some(by)) =
                    (&self.foreign, self.bind(*x, on), self.bind(*y, on))
                else {
                    return Ok(Ok(()));
                };
                let n = bx.range().len().min(by.range().len());
                if !self.known(bx, n) {
                    return Ok(Ok(()));
                }
                let (hx, hy) = (
                    self.handle(bx).map_err(|e| e.to_string())?,
                    self.handle(by).map_err(|e| e.to_string())?,
                );
                if by.overlaps(bx) {
                    let got = c.foreign(stream, copy, &[&hx, &hy]);
                    check("an aliased foreign copy", Expect::Refused, &got)?;
                    got
                } else {
                    let refused = mode == Mode::Record && depth > 0 && !D::FOREIGN_IN_BODIES;
                    let got =
                        self.launch_or_refused(stream, mode, &[bx.id], &[by], refused, &|| {
                            c.foreign(stream, copy, &[&hx, &hy])
                        })?;
                    if got.is_ok() {
                        self.effect(mode, Resolved::Copy(bx, by), recorded);
                    }
                    got
                }
            }
            Work::ForeignFail(t) => {
                let (Some(fail), Some(b)) = (&self.foreign_fail, self.bind(*t, on)) else {
                    return Ok(Ok(()));
                };
                let h = self.handle(b).map_err(|e| e.to_string())?;
                // Its code runs as it is recorded: now eagerly; inside a
                // window now too, or when the graph is made where the
                // backend records it into the graph's command buffer then
                // (a body refuses it before keeping it).
                let now = mode != Mode::Record || depth > 0 || !D::FOREIGN_RUNS_AT_INSTANTIATE;
                let got = self.launch_or_refused(stream, mode, &[], &[b], now, &|| {
                    c.foreign(stream, fail, &[&h])
                })?;
                if got.is_ok() {
                    self.refuses_instantiate.set(true);
                    self.effect(mode, Resolved::Fill(b, 0.0), recorded);
                }
                got
            }
            Work::ForeignFill(t) => {
                let (Some([_, fill]), Some(b)) = (&self.foreign, self.bind(*t, on)) else {
                    return Ok(Ok(()));
                };
                let h = self.handle(b).map_err(|e| e.to_string())?;
                let refused = mode == Mode::Record && depth > 0 && !D::FOREIGN_IN_BODIES;
                let got = self.launch_or_refused(stream, mode, &[], &[b], refused, &|| {
                    c.foreign(stream, fill, &[&h])
                })?;
                if got.is_ok() {
                    self.effect(mode, Resolved::Fill(b, FOREIGN_FILL), recorded);
                }
                got
            }
            Work::Scale(t, a, b) => {
                let Some((bx, h, n)) = self.known_target(*t, on)? else {
                    return Ok(Ok(()));
                };
                let got = launch(&[bx.id], &[bx], &|| {
                    self.kernels
                        .scale(c, stream, crate::workload::grid(n), &h, n, *a, *b)
                })?;
                if got.is_ok() {
                    self.effect(mode, Resolved::Scale(bx, *a, *b), recorded);
                }
                got
            }
            Work::Countdown(counter, which) => {
                // A counter whose first element the model knows.
                let model = self.model.borrow();
                let known: Vec<&Live> = self
                    .buffers
                    .iter()
                    .filter(|b| b.alive())
                    .filter(|b| on.is_none_or(|s| b.stream == s))
                    .filter(|b| model.mem.get(&b.id).is_some_and(|m| m.values[0].is_some()))
                    .collect();
                drop(model);
                if known.is_empty() {
                    return Ok(Ok(()));
                }
                let live = known[usize::from(*counter) % known.len()];
                let flag = self.flag_of(stream, *which)?;
                let counter = Bind {
                    id: live.id,
                    part: Part::Whole,
                };
                let flag_bind = Bind {
                    id: flag.1,
                    part: Part::Whole,
                };
                let handle = live.get()?;
                let got = launch(&[live.id], &[counter, flag_bind], &|| {
                    self.kernels.countdown(c, stream, &handle, &flag.0)
                })?;
                if got.is_ok() {
                    self.effect(
                        mode,
                        Resolved::Countdown {
                            counter: live.id,
                            flag: flag.1,
                        },
                        recorded,
                    );
                }
                got
            }
            Work::Mismatch(t) => {
                let Some(b) = self.bind(*t, on) else {
                    return Ok(Ok(()));
                };
                let h = self.handle(b).map_err(|e| e.to_string())?;
                let got = c.launch(
                    stream,
                    self.kernels.get(crate::workload::UserKernel::Scale),
                    [1, 1, 1],
                    &[&h, &h],
                    &[],
                    &[0; 12],
                );
                check("a mismatched launch", Expect::Refused, &got)?;
                got
            }
            Work::TooLong(t) => {
                let Some(b) = self.bind(*t, on) else {
                    return Ok(Ok(()));
                };
                let h = self.handle(b).map_err(|e| e.to_string())?;
                let n = b.range().len() as u32 + 1;
                let got = c.run_builtin(stream, Builtin::Fill, &[&h], n, 1.0);
                check("a builtin too long", Expect::Refused, &got)?;
                got
            }
            Work::Write(b, v) => {
                let Some(at) = self.buffer(*b, on) else {
                    return Ok(Ok(()));
                };
                let live = &self.buffers[at];
                let got = c.write_f32(&live.get()?, &[*v; ELEMENTS]);
                let refused =
                    mode == Mode::Record && depth > 0 && !self.model.borrow().copies_in_bodies;
                check(
                    "a write",
                    if refused { Expect::Refused } else { Expect::Ok },
                    &got,
                )?;
                if got.is_ok() {
                    self.effect(mode, Resolved::Write(live.id, *v), recorded);
                }
                got
            }
            Work::SetFlag(which, v) => {
                let flag = self.flag_of(stream, *which)?;
                let got = c.write(&flag.0, &v.to_le_bytes());
                let refused =
                    mode == Mode::Record && depth > 0 && !self.model.borrow().copies_in_bodies;
                check(
                    "a flag's write",
                    if refused { Expect::Refused } else { Expect::Ok },
                    &got,
                )?;
                if got.is_ok() {
                    self.effect(mode, Resolved::SetFlag(flag.1, *v), recorded);
                }
                got
            }
            Work::Temporary(t, v) => {
                if depth > 0 {
                    return Ok(Ok(()));
                }
                let Some((b, h, n)) = self.known_target(*t, on)? else {
                    return Ok(Ok(()));
                };
                // Two launches: the temporary's fill meets an armed fault
                // first, and claims only the temporary; the add reads the
                // target.
                let fault = std::mem::take(&mut self.model.borrow_mut().launch_fault);
                let got = if fault {
                    let got = c.allocate(stream, (ELEMENTS * 4) as u64).and_then(|tmp| {
                        c.run_builtin(stream, Builtin::Fill, &[&tmp], ELEMENTS as u32, *v)
                    });
                    check("a temporary's fill", Expect::Failed, &got)?;
                    got
                } else {
                    launch(&[b.id], &[b], &|| {
                        let tmp = c.allocate(stream, (ELEMENTS * 4) as u64)?;
                        c.run_builtin(stream, Builtin::Fill, &[&tmp], ELEMENTS as u32, *v)?;
                        c.run_builtin(stream, Builtin::Add, &[&h, &tmp], n, 0.0)
                    })?
                };
                if got.is_ok() {
                    self.effect(mode, Resolved::Temporary(b, *v), recorded);
                }
                got
            }
            Work::BadFlag => {
                let flag = self.flag_of(stream, 0)?;
                let short = flag.0.range(0, 2).map_err(|e| e.to_string())?;
                let got = c.if_flag(stream, &short, || Ok(())).map(drop);
                check("a short flag", Expect::Refused, &got)?;
                got
            }
            Work::WaitFor(other) => {
                let Some(t) = self.stream(*other) else {
                    return Ok(Ok(()));
                };
                let other = self.streams[t].id;
                let got = c.wait(stream, other);
                let refused = mode == Mode::Record && other != stream;
                check(
                    "a wait",
                    if refused { Expect::Refused } else { Expect::Ok },
                    &got,
                )?;
                got
            }
            Work::ForkJoin(other, works) => {
                let Some(t) = self.stream(*other) else {
                    return Ok(Ok(()));
                };
                let other = self.streams[t].id;
                if other == stream {
                    return Ok(Ok(()));
                }
                if mode == Mode::Record && depth > 0 {
                    let got = c.wait(other, stream);
                    check("a fork inside a body", Expect::Refused, &got)?;
                    got
                } else {
                    let fork = c.wait(other, stream);
                    check("a fork", Expect::Ok, &fork)?;
                    let mut branch = Ok(());
                    for work in works {
                        if let Err(e) = self.work(other, work, mode, depth, recorded)? {
                            branch = Err(e);
                            break;
                        }
                    }
                    let join = c.wait(stream, other);
                    if branch.is_ok() {
                        check("a join", Expect::Ok, &join)?;
                    }
                    branch.and(join)
                }
            }
            Work::ForeignFlag => {
                let got = c.if_flag(stream, &self.foreign_flag, || Ok(())).map(drop);
                check("another client's flag", Expect::Refused, &got)?;
                got
            }
            Work::Ignore(work) => {
                let _ignored = self.work(stream, work, mode, depth, recorded)?;
                return Ok(Ok(()));
            }
            Work::Shared(work) => {
                let before = self.any_stream.replace(true);
                let got = self.work(stream, work, mode, depth, recorded);
                self.any_stream.set(before);
                return got;
            }
            Work::DropBuffer(b) => {
                if let Some(at) = self.buffer(*b, on) {
                    match mode {
                        Mode::Eager => drop(self.buffers[at].handle.take()),
                        Mode::Record => self.dropping.borrow_mut().push(self.buffers[at].id),
                        Mode::Warmup => {}
                    }
                }
                Ok(())
            }
            Work::DestroyGraph(g) => {
                if mode == Mode::Warmup {
                    return Ok(Ok(()));
                }
                let destroyed = self.destroyed_graphs.borrow().clone();
                let recapturing = self.recapturing.get();
                let candidates: Vec<&Graph<D>> = self
                    .graphs
                    .iter()
                    .filter(|g| {
                        let id = g.handle.id();
                        !destroyed.contains(&id) && Some(id) != recapturing
                    })
                    .collect();
                let Some(graph) = candidates.get(usize::from(*g) % candidates.len().max(1)) else {
                    return Ok(Ok(()));
                };
                let got = c.destroy(&graph.handle);
                check("a destroy in work", Expect::Ok, &got)?;
                self.destroyed_graphs.borrow_mut().push(graph.handle.id());
                got
            }
            Work::RefusedConditional => {
                if mode != Mode::Record || self.plan.armed(Primitive::Conditional) {
                    return Ok(Ok(()));
                }
                let flag = self.flag_of(stream, 0)?;
                self.plan.fail(Primitive::Conditional, 1);
                let got = c.if_flag(stream, &flag.0, || Ok(())).map(drop);
                let fired = !self.plan.armed(Primitive::Conditional);
                self.plan.disarm_only(Primitive::Conditional);
                let claimed = self
                    .model
                    .borrow()
                    .mem
                    .get(&flag.1)
                    .is_some_and(|m| m.claim.is_some());
                if self.model.borrow().conditionals && !fired && !claimed {
                    return err("a conditional node was recorded without the driver's call");
                }
                check("a conditional the driver refuses", Expect::Refused, &got)?;
                got
            }
            Work::Conditional(cond, which, bodies) => {
                return self.conditional(stream, *cond, *which, bodies, mode, depth, recorded);
            }
        };
        Ok(got)
    }

    fn flag_of(&self, stream: StreamId, which: u8) -> Result<(Buffer, BufferId), Disagreement> {
        let s = self.stream_index(stream).ok_or("no flag")?;
        Ok(self.streams[s].flags[usize::from(which % 2)].clone())
    }

    /// A launch reading `reads` and writing `writes`: what the model expects
    /// of it (a claimed input fails it, then an armed fault does), checked
    /// against `call`, and the claims its failure leaves.
    fn launch(
        &self,
        stream: StreamId,
        mode: Mode,
        reads: &[BufferId],
        writes: &[Bind],
        call: &dyn Fn() -> Result<(), Error>,
    ) -> Result<Result<(), Error>, Disagreement> {
        self.launch_or_refused(stream, mode, reads, writes, false, call)
    }

    /// [`World::launch`] of one the backend itself refuses when `refused`
    /// (a foreign operation in a body it cannot hold): it fails like a
    /// launch the driver refused, unless a claim or a fault comes first.
    fn launch_or_refused(
        &self,
        stream: StreamId,
        mode: Mode,
        reads: &[BufferId],
        writes: &[Bind],
        refused: bool,
        call: &dyn Fn() -> Result<(), Error>,
    ) -> Result<Result<(), Error>, Disagreement> {
        let expect = {
            let mut model = self.model.borrow_mut();
            let claimed = reads
                .iter()
                .any(|id| model.mem.get(id).is_some_and(|m| m.claim.is_some()));
            if claimed {
                Expect::Claimed
            } else if model.launch_fault {
                model.launch_fault = false;
                Expect::Failed
            } else if refused {
                Expect::Failed
            } else {
                Expect::Ok
            }
        };
        let event = self.model.borrow().event_fault;
        let got = call();
        // An event the launch needed, refused: the launch fails (rule 20).
        let expect = match event {
            Some(primitive) if expect == Expect::Ok && !self.plan.armed(primitive) => {
                self.model.borrow_mut().event_fault = None;
                Expect::Failed
            }
            _ => expect,
        };
        check("a launch", expect, &got)?;
        let mut model = self.model.borrow_mut();
        if mode != Mode::Record && expect == Expect::Ok {
            for id in reads.iter().chain(writes.iter().map(|w| &w.id)) {
                model.users.entry(*id).or_default().insert(stream);
            }
        }
        match expect {
            Expect::Ok if mode != Mode::Record => {
                for w in writes {
                    if w.part == Part::Whole
                        && let Some(m) = model.mem.get_mut(&w.id)
                    {
                        m.claim = None;
                    }
                }
            }
            Expect::Ok => {}
            _ => {
                for w in writes {
                    if let Some(m) = model.mem.get_mut(&w.id)
                        && !matches!(m.claim, Some(Claim::Other))
                    {
                        m.claim = Some(Claim::Other);
                    }
                }
            }
        }
        Ok(got)
    }

    /// Resolved work that ran: applied now eagerly, or kept for the graph.
    fn effect(&self, mode: Mode, work: Resolved, recorded: &mut Vec<Resolved>) {
        match mode {
            Mode::Eager | Mode::Warmup => {
                let mut model = self.model.borrow_mut();
                if let Resolved::Write(id, _) | Resolved::SetFlag(id, _) = &work
                    && let Some(m) = model.mem.get_mut(id)
                {
                    m.claim = None;
                }
                apply(&mut model, &work);
            }
            Mode::Record => recorded.push(work),
        }
    }
}

/// `work` applied to the model's values (a replay's, or eager work's).
fn apply(model: &mut Model, work: &Resolved) {
    let mem = &mut model.mem;
    let get = |mem: &HashMap<BufferId, Mem>, id: BufferId| {
        mem.get(&id).map(|m| m.values.clone()).unwrap_or_default()
    };
    let all = ELEMENTS;
    match work {
        // `to += a * from`, over the elements both bind.
        Resolved::Add(to, from) | Resolved::Axpy(from, to, _) => {
            let a = if let Resolved::Axpy(_, _, a) = work {
                Some(*a)
            } else {
                None
            };
            let xs = get(mem, from.id);
            let start = from.range().start;
            let n = from.range().len().min(to.range().len());
            set(mem, *to, n, |i, old| {
                let x = xs.get(start + i).copied().flatten()?;
                // Unfused, as every backend computes it.
                let product = a.map_or(x, |a| a * x);
                Some(old? + product)
            });
        }
        Resolved::Fill(b, v) => set(mem, *b, all, |_, _| Some(*v)),
        Resolved::Copy(src, dst) => {
            let xs = get(mem, src.id);
            let start = src.range().start;
            let n = src.range().len().min(dst.range().len());
            set(mem, *dst, n, |i, _| xs.get(start + i).copied().flatten());
        }
        Resolved::Scale(x, a, b) => set(mem, *x, all, |_, old| Some(old? * a + b)),
        Resolved::Temporary(x, v) => set(mem, *x, all, |_, old| Some(old? + v)),
        Resolved::Countdown { counter, flag } => {
            let value = mem
                .get_mut(counter)
                .and_then(|m| m.values.first_mut())
                .and_then(|c| {
                    *c = c.map(|c| c - 1.0);
                    *c
                });
            if let Some(m) = mem.get_mut(flag) {
                m.flag = value.map(|c| u32::from(c > 0.0));
            }
        }
        Resolved::Write(id, v) => {
            if let Some(m) = mem.get_mut(id) {
                m.values = vec![Some(*v); ELEMENTS];
            }
        }
        Resolved::SetFlag(id, v) => {
            if let Some(m) = mem.get_mut(id) {
                m.flag = Some(*v);
            }
        }
        Resolved::Cond(cond, flag, bodies) => {
            let is_set =
                |mem: &HashMap<BufferId, Mem>| mem.get(flag).and_then(|m| m.flag).unwrap_or(0) != 0;
            match cond {
                Cond::If | Cond::IfElse => {
                    let body = if is_set(mem) {
                        bodies.first()
                    } else {
                        bodies.get(1)
                    };
                    for w in body.into_iter().flatten() {
                        apply(model, w);
                    }
                }
                Cond::While(bound) => {
                    for _ in 0..*bound {
                        if !is_set(&model.mem) {
                            break;
                        }
                        for w in &bodies[0] {
                            apply(model, w);
                        }
                    }
                }
            }
        }
    }
}

/// Set the elements `bind` names, from element `i` of the binding and the
/// old value.
fn set(
    mem: &mut HashMap<BufferId, Mem>,
    bind: Bind,
    n: usize,
    f: impl Fn(usize, Option<f32>) -> Option<f32>,
) {
    if let Some(m) = mem.get_mut(&bind.id) {
        for (i, at) in bind.range().enumerate().take(n) {
            m.values[at] = f(i, m.values[at]);
        }
    }
}

/// A disagreement found inside a body the library calls: kept, and the
/// body stopped with an error, so that the call returns.
type Found = RefCell<Option<Disagreement>>;

fn stop(found: &Found, what: Disagreement) -> Error {
    found.borrow_mut().get_or_insert(what);
    Error::BadLaunch("the model stopped the body".into())
}

impl<D: UserKernels> World<D> {
    /// Run `works` in order until one fails, as a body with `?` would.
    fn body(
        &self,
        stream: StreamId,
        works: &[Work],
        mode: Mode,
        depth: u32,
        recorded: &mut Vec<Resolved>,
        found: &Found,
    ) -> Result<(), Error> {
        for work in works {
            match self.work(stream, work, mode, depth, recorded) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(what) => return Err(stop(found, what)),
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn conditional(
        &self,
        stream: StreamId,
        cond: Cond,
        which: u8,
        bodies: &[Vec<Work>],
        mode: Mode,
        depth: u32,
        recorded: &mut Vec<Resolved>,
    ) -> Result<Result<(), Error>, Disagreement> {
        let (flag, flag_id) = self.flag_of(stream, which)?;
        let c = &self.client;
        let found: Found = RefCell::new(None);
        let (claimed, set_now) = {
            let model = self.model.borrow();
            let mem = model.mem.get(&flag_id).ok_or("no flag")?;
            (mem.claim.is_some(), mem.flag.unwrap_or(0) != 0)
        };
        let empty = Vec::new();
        let then = bodies.first().unwrap_or(&empty);
        let otherwise = bodies.get(1).unwrap_or(&empty);
        if mode == Mode::Record {
            let conditionals = self.model.borrow().conditionals;
            let mut inner: Vec<Vec<Resolved>> = vec![Vec::new(); bodies.len().max(1)];
            let got = {
                let (first, rest) = inner.split_at_mut(1);
                let run0 = || self.body(stream, then, mode, depth + 1, &mut first[0], &found);
                match cond {
                    Cond::If => c.if_flag(stream, &flag, run0),
                    Cond::While(bound) => c.while_flag(stream, &flag, bound, run0),
                    Cond::IfElse => c.if_else_flag(stream, &flag, run0, || {
                        self.body(stream, otherwise, mode, depth + 1, &mut rest[0], &found)
                    }),
                }
            };
            if let Some(what) = found.take() {
                return Err(what);
            }
            let expect = if !conditionals {
                Expect::Refused
            } else if claimed {
                Expect::Claimed
            } else {
                Expect::Ok
            };
            let answer = got.as_ref().map(drop).map_err(Clone::clone);
            // A body's own error comes back instead: the model saw it.
            if expect == Expect::Ok && answer.is_err() {
                let opened = Resolved::Cond(cond, flag_id, inner);
                recorded.push(opened);
                return Ok(answer);
            }
            check("a recorded conditional", expect, &answer)?;
            if let Ok(ran) = &got
                && *ran != Ran::Recorded
            {
                return err(format!("a recorded conditional answered {ran:?}"));
            }
            if answer.is_ok() {
                recorded.push(Resolved::Cond(cond, flag_id, inner));
            }
            return Ok(answer);
        }
        // On the host's word: each check reads the flag back.
        if claimed {
            let got = c.if_flag(stream, &flag, || Ok(())).map(drop);
            check("a conditional on a claimed flag", Expect::Claimed, &got)?;
            return Ok(got);
        }
        let mut sink = Vec::new();
        let calls = std::cell::Cell::new(0u32);
        let wrong = |what: &str| stop(&found, format!("the library ran {what}"));
        let got = match cond {
            Cond::If => c.if_flag(stream, &flag, || {
                calls.set(calls.get() + 1);
                if !self.flag_set(flag_id) {
                    return Err(wrong("an if's body with the flag clear"));
                }
                self.body(stream, then, mode, depth + 1, &mut sink, &found)
            }),
            Cond::IfElse => {
                let sink2 = RefCell::new(Vec::new());
                c.if_else_flag(
                    stream,
                    &flag,
                    || {
                        calls.set(calls.get() + 1);
                        if !self.flag_set(flag_id) {
                            return Err(wrong("the then body with the flag clear"));
                        }
                        self.body(
                            stream,
                            then,
                            mode,
                            depth + 1,
                            &mut sink2.borrow_mut(),
                            &found,
                        )
                    },
                    || {
                        calls.set(calls.get() + 1);
                        if self.flag_set(flag_id) {
                            return Err(wrong("the else body with the flag set"));
                        }
                        self.body(
                            stream,
                            otherwise,
                            mode,
                            depth + 1,
                            &mut sink2.borrow_mut(),
                            &found,
                        )
                    },
                )
            }
            Cond::While(bound) => c.while_flag(stream, &flag, bound, || {
                calls.set(calls.get() + 1);
                if !self.flag_set(flag_id) {
                    return Err(wrong("a loop's body with the flag clear"));
                }
                self.body(stream, then, mode, depth + 1, &mut sink, &found)
            }),
        };
        if let Some(what) = found.take() {
            return Err(what);
        }
        self.waited(stream);
        let want = match cond {
            Cond::If => Ran::Branch(set_now.then_some(0)),
            Cond::IfElse => Ran::Branch(Some(if set_now { 0 } else { 1 })),
            Cond::While(bound) => Ran::Loop {
                iterations: calls.get(),
                bound_reached: calls.get() == bound && self.flag_set(flag_id),
            },
        };
        match got {
            Ok(ran) if ran == want => Ok(Ok(())),
            Ok(ran) => err(format!(
                "a conditional ran {ran:?}, the model says {want:?}"
            )),
            // A body's error, seen by the model as it happened.
            Err(e) if calls.get() > 0 => Ok(Err(e)),
            Err(e) => err(format!("a conditional failed: {e}")),
        }
    }

    /// The buffer `target` picks among those `on` allows, its handle and
    /// its elements, where the model knows every one of them (work that
    /// reads and writes it in place).
    fn known_target(
        &self,
        target: Target,
        on: Option<StreamId>,
    ) -> Result<Option<(Bind, Buffer, u32)>, Disagreement> {
        let Some(bind) = self.bind(target, on) else {
            return Ok(None);
        };
        if !self.known(bind, ELEMENTS) {
            return Ok(None);
        }
        let handle = self.handle(bind).map_err(|e| e.to_string())?;
        Ok(Some((bind, handle, bind.range().len() as u32)))
    }

    /// Whether the model knows the first `n` elements `bind` names.
    fn known(&self, bind: Bind, n: usize) -> bool {
        self.model
            .borrow()
            .mem
            .get(&bind.id)
            .is_some_and(|m| m.values[bind.range()].iter().take(n).all(Option::is_some))
    }

    fn flag_set(&self, flag: BufferId) -> bool {
        self.model
            .borrow()
            .mem
            .get(&flag)
            .and_then(|m| m.flag)
            .unwrap_or(0)
            != 0
    }

    /// Run `works` as a one-call capture's `pass`: the recorded run's work
    /// kept in `recorded`, the pass that failed of itself in `failed_in`.
    /// Answers the pass's mode. The recorded pass drops, as it ends, the
    /// buffers its work asked to drop.
    fn pass(
        &self,
        stream: StreamId,
        works: &[Work],
        pass: Pass,
        (recorded, failed_in, found): (&RefCell<Vec<Resolved>>, &RefCell<Option<Mode>>, &Found),
    ) -> Result<Mode, Error> {
        let mode = match pass {
            Pass::Warmup => Mode::Warmup,
            Pass::Record => Mode::Record,
        };
        let mut sink = Vec::new();
        let into = if mode == Mode::Record {
            &mut *recorded.borrow_mut()
        } else {
            &mut sink
        };
        let ran = self.body(stream, works, mode, 0, into, found);
        self.drop_pending();
        if ran.is_err() {
            *failed_in.borrow_mut() = Some(mode);
        }
        ran.map(|()| mode)
    }

    /// Claim what `works` write, as a window that cannot seal does.
    fn claim_written(&self, works: &[Resolved], claim: Claim) {
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for w in works {
            w.accesses(&mut reads, &mut writes);
        }
        let mut model = self.model.borrow_mut();
        for (id, _) in writes {
            if let Some(m) = model.mem.get_mut(&id)
                && !matches!(m.claim, Some(Claim::Other))
            {
                m.claim = Some(claim);
            }
        }
    }

    /// Which of the capture faults are armed now.
    fn armed(&self) -> Fired {
        Fired {
            begin: self.plan.armed(Primitive::Begin),
            instantiate: self.plan.armed(Primitive::Instantiate),
            update: self.plan.armed(Primitive::Update),
            upload: self.plan.armed(Primitive::Upload),
        }
    }

    /// The faults armed `before` that fired since, an upload's counted on
    /// `stream`.
    fn fired(&self, before: Fired, stream: StreamId) -> Fired {
        let now = self.armed();
        let fired = Fired {
            begin: before.begin && !now.begin,
            instantiate: before.instantiate && !now.instantiate,
            update: before.update && !now.update,
            upload: before.upload && !now.upload,
        };
        if fired.upload {
            *self
                .model
                .borrow_mut()
                .upload_failures
                .entry(stream)
                .or_default() += 1;
        }
        fired
    }

    /// The graph `which` names.
    fn graph_at(&self, which: Which) -> &Graph<D> {
        match which {
            Which::Own(g) => &self.graphs[g],
            Which::Cached(c) => &self.cached[c].graph,
        }
    }

    fn graph_at_mut(&mut self, which: Which) -> &mut Graph<D> {
        match which {
            Which::Own(g) => &mut self.graphs[g],
            Which::Cached(c) => &mut self.cached[c].graph,
        }
    }

    /// `stream`'s cache, taken out while a call borrows the world.
    fn take_cache(&mut self, stream: StreamId) -> GraphCache<u8, Faulty<D>> {
        self.caches
            .remove(&stream)
            .unwrap_or_else(|| GraphCache::new(&self.client, stream, 2, None))
    }

    /// `GraphCache::run` on stream `s`'s cache: a replay, a re-capture or
    /// a capture, as the model's entry for the key says.
    fn cached(&mut self, s: usize, key: u8, fp: u8, works: &[Work]) -> Result<(), Disagreement> {
        let stream = self.streams[s].id;
        let tick = {
            let tick = self.ticks.entry(stream).or_default();
            *tick += 1;
            *tick
        };
        let at = self
            .cached
            .iter()
            .position(|c| c.graph.stream == stream && c.key == key);
        match at {
            Some(at) => {
                self.cached[at].tick = tick;
                let via = Via::Cache(key, fp);
                if self.cached[at].fingerprint == fp {
                    self.replay(Which::Cached(at), via)
                } else {
                    self.recapture(Which::Cached(at), via, false, works)
                }
            }
            None => {
                if self.graphs.len() + self.cached.len() >= 2 * MOST_GRAPHS {
                    return Ok(());
                }
                self.capture_via(s, Style::OneCall, works, Some((key, fp, tick)))
            }
        }
    }

    fn capture(&mut self, s: usize, style: Style, works: &[Work]) -> Result<(), Disagreement> {
        self.capture_via(s, style, works, None)
    }

    /// A capture in `style`, through the client or, where `cache` names a
    /// key, its fingerprint and the cache's call, as that key's miss.
    fn capture_via(
        &mut self,
        s: usize,
        style: Style,
        works: &[Work],
        cache: Option<(u8, u8, u64)>,
    ) -> Result<(), Disagreement> {
        let stream = self.streams[s].id;
        self.doomed.set(false);
        self.refuses_instantiate.set(false);
        let c = self.client.clone();
        let mut graph_cache = cache.map(|_| self.take_cache(stream));
        let found: Found = RefCell::new(None);
        let recorded = RefCell::new(Vec::new());
        // Whether the recorded run failed of itself (not by the style).
        let failed_in = RefCell::new(None::<Mode>);
        let armed = self.armed();
        let got = if style == Style::ThreeStep {
            let window = c.prepare(stream).map_err(|e| format!("prepare: {e}"))?;
            let warm = self.body(stream, works, Mode::Warmup, 0, &mut Vec::new(), &found);
            if let Some(what) = found.take() {
                return Err(what);
            }
            if warm.is_err() {
                *failed_in.borrow_mut() = Some(Mode::Warmup);
                c.instantiate(stream, window).map(Some)
            } else if let Err(e) = c.begin(stream, window) {
                // A refused begin leaves the stream as it was found.
                if !self.fired(armed, stream).begin {
                    return err(format!("begin: {e}"));
                }
                return Ok(());
            } else {
                let run = self.body(
                    stream,
                    works,
                    Mode::Record,
                    0,
                    &mut recorded.borrow_mut(),
                    &found,
                );
                self.drop_pending();
                if let Some(what) = found.take() {
                    return Err(what);
                }
                if run.is_err() {
                    *failed_in.borrow_mut() = Some(Mode::Record);
                }
                c.instantiate(stream, window).map(Some)
            }
        } else {
            let body = |pass: Pass| -> Result<(), Error> {
                let mode = self.pass(stream, works, pass, (&recorded, &failed_in, &found))?;
                match (style, mode) {
                    (Style::Failing, Mode::Record) => {
                        Err(Error::BadLaunch("the body fails".into()))
                    }
                    (Style::Panicking, Mode::Record) => std::panic::panic_any("the body panics"),
                    _ => Ok(()),
                }
            };
            let call = || match (&mut graph_cache, cache) {
                (Some(graph_cache), Some((key, _, _))) => {
                    let fp = cache.map_or(0, |(_, fp, _)| u64::from(fp));
                    match graph_cache.run(key, fp, body) {
                        Ok(Served::Miss) => Ok(graph_cache.graph(&key).cloned()),
                        Ok(served) => {
                            found.replace(Some(format!(
                                "a cache served {served:?} for a key it has no graph for"
                            )));
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    }
                }
                _ => c.capture(stream, body).map(|(graph, ())| Some(graph)),
            };
            match catch_unwind(AssertUnwindSafe(call)) {
                Ok(got) => got,
                Err(_) if style == Style::Panicking && failed_in.borrow().is_none() => Ok(None),
                Err(_) => return err("a capture's body panicked where the model has it return"),
            }
        };
        if let Some(graph_cache) = graph_cache {
            self.caches.insert(stream, graph_cache);
        }
        if let Some(what) = found.take() {
            return Err(what);
        }
        let recorded = recorded.into_inner();
        let failed = *failed_in.borrow();
        let fired = self.fired(armed, stream);
        // A refused begin is a capture refused after its warmup: nothing
        // recorded, nothing claimed.
        if fired.begin {
            return match got {
                Err(_) if recorded.is_empty() => Ok(()),
                got => err(format!(
                    "a refused begin answered {:?}, {} pieces recorded",
                    got.map(|g| g.map(|g| g.id())),
                    recorded.len()
                )),
            };
        }
        // A refused instantiate claims what the recording would write.
        // A foreign operation whose code fails is run when the graph is
        // made: a window that reaches its instantiate meets it, and so does
        // one whose body panics (closing it on unwind makes the graph, to
        // destroy it at once).
        let refused_at_end = self.refuses_instantiate.get()
            && matches!(style, Style::OneCall | Style::ThreeStep | Style::Panicking)
            && failed.is_none();
        let doomed = self.doomed.get() || fired.instantiate || refused_at_end;
        match (failed, style, got) {
            (None, Style::OneCall | Style::ThreeStep, Err(_)) if doomed => {
                self.claim_written(&recorded, Claim::Other);
                Ok(())
            }
            (None, Style::Panicking, Ok(None)) if doomed => {
                self.claim_written(&recorded, Claim::Other);
                Ok(())
            }
            (None, _, Ok(Some(_))) if doomed => err(format!(
                "a window that was refused a call or its instantiate ({fired:?}) sealed"
            )),
            (None, Style::OneCall | Style::ThreeStep, Ok(Some(handle))) => {
                let graph = Graph {
                    handle,
                    stream,
                    works: recorded,
                    source: works.to_vec(),
                };
                match cache {
                    Some((key, fingerprint, tick)) => self.cache_insert(CachedGraph {
                        key,
                        fingerprint,
                        tick,
                        graph,
                    }),
                    None => self.graphs.push(graph),
                }
                Ok(())
            }
            (None, Style::Panicking, Ok(None)) => Ok(()),
            (Some(Mode::Warmup), _, Err(_)) => Ok(()),
            (Some(Mode::Record), _, Err(_)) | (None, Style::Failing, Err(_)) => {
                self.claim_written(&recorded, Claim::Other);
                Ok(())
            }
            (failed, style, got) => err(format!(
                "a {style:?} capture failed in {failed:?} by the model, and answered {:?}",
                got.map(|g| g.map(|g| g.id()))
            )),
        }
    }

    /// A cache's new graph, after its least recently used one went where
    /// the cache was full.
    fn cache_insert(&mut self, entry: CachedGraph<D>) {
        let stream = entry.graph.stream;
        while self
            .cached
            .iter()
            .filter(|c| c.graph.stream == stream)
            .count()
            >= 2
        {
            let oldest = self
                .cached
                .iter()
                .enumerate()
                .filter(|(_, c)| c.graph.stream == stream)
                .min_by_key(|(_, c)| c.tick)
                .map(|(i, _)| i);
            let Some(oldest) = oldest else { break };
            let evicted = self.cached.remove(oldest);
            let ids = graph_buffers(&evicted.graph.works);
            drop(evicted);
            for id in ids {
                self.released_maybe(id);
            }
        }
        self.cached.push(entry);
    }

    fn recapture(
        &mut self,
        which: Which,
        via: Via,
        failing: bool,
        works: &[Work],
    ) -> Result<(), Disagreement> {
        let stream = self.graph_at(which).stream;
        self.doomed.set(false);
        self.refuses_instantiate.set(false);
        let c = self.client.clone();
        let found: Found = RefCell::new(None);
        let recorded = RefCell::new(Vec::new());
        let failed_in = RefCell::new(None::<Mode>);
        let handle = self.graph_at(which).handle.clone();
        self.recapturing.set(Some(handle.id()));
        let armed = self.armed();
        let mut graph_cache = match via {
            Via::Cache(..) => Some(self.take_cache(stream)),
            Via::Client { .. } => None,
        };
        let body = |pass: Pass| -> Result<(), Error> {
            let mode = self.pass(stream, works, pass, (&recorded, &failed_in, &found))?;
            if failing && mode == Mode::Record {
                return Err(Error::BadLaunch("the body fails".into()));
            }
            Ok(())
        };
        let got = match (&mut graph_cache, via) {
            (Some(graph_cache), Via::Cache(key, fp)) => {
                match graph_cache.run(key, u64::from(fp), body) {
                    Ok(Served::UpdatedInPlace | Served::Reinstantiated) => Ok(()),
                    Ok(served) => {
                        found.replace(Some(format!(
                            "a cache served {served:?} for a key whose fingerprint changed"
                        )));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            _ => c.recapture(&handle, body).map(drop),
        };
        self.recapturing.set(None);
        if let Some(graph_cache) = graph_cache {
            self.caches.insert(stream, graph_cache);
        }
        if let Some(what) = found.take() {
            return Err(what);
        }
        let recorded = recorded.into_inner();
        let failed = *failed_in.borrow();
        let fired = self.fired(armed, stream);
        let doomed = self.doomed.get() || (self.refuses_instantiate.get() && !failing);
        match (failed, got) {
            // A body that fails of itself abandons the window: what the
            // recording would have written is claimed.
            (None, Err(_)) if failing => {
                self.claim_written(&recorded, Claim::Other);
                Ok(())
            }
            // A refused update, or one the driver refuses, leaves the graph
            // as it was and claims nothing.
            (None, Err(_)) if doomed || fired.refusing() => Ok(()),
            (None, Ok(())) if doomed || fired.refusing() => err(format!(
                "a re-capture refused a call of its recording thread or by the driver \
                 ({fired:?}), and updated"
            )),
            (None, Ok(())) => {
                if let (Which::Cached(at), Via::Cache(_, fp)) = (which, via) {
                    self.cached[at].fingerprint = fp;
                }
                self.graph_at_mut(which).source = works.to_vec();
                let old = std::mem::replace(&mut self.graph_at_mut(which).works, recorded);
                for id in graph_buffers(&old) {
                    self.released_maybe(id);
                }
                Ok(())
            }
            (Some(Mode::Warmup), Err(_)) => Ok(()),
            (Some(Mode::Record), Err(_)) => {
                self.claim_written(&recorded, Claim::Other);
                Ok(())
            }
            (failed, got) => err(format!(
                "a recapture failed in {failed:?} by the model, and answered {got:?}",
            )),
        }
    }

    fn replay(&mut self, which: Which, via: Via) -> Result<(), Disagreement> {
        let graph = self.graph_at(which);
        let (id, stream) = (graph.handle.id(), graph.stream);
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for w in &graph.works {
            w.accesses(&mut reads, &mut writes);
        }
        let expect = {
            let mut model = self.model.borrow_mut();
            let claimed = reads.iter().any(|r| {
                model
                    .mem
                    .get(r)
                    .and_then(|m| m.claim)
                    .is_some_and(|claim| claim != Claim::Replay(id))
            });
            if claimed {
                Expect::Claimed
            } else if model.replay_fault {
                model.replay_fault = false;
                Expect::Failed
            } else {
                Expect::Ok
            }
        };
        let replays = |world: &Self| {
            let graph = world.graph_at(which);
            world
                .client
                .graph_info(&graph.handle)
                .map(|info| info.replays)
                .map_err(|e| format!("graph info: {e}"))
        };
        let before = replays(self)?;
        let graph = self.graph_at(which);
        let got = match via {
            Via::Client { by_id: true } => self.client.replay_id(id),
            Via::Client { by_id: false } => self.client.replay(&graph.handle),
            Via::Cache(key, fp) => {
                let mut graph_cache = self.take_cache(stream);
                let ran = std::cell::Cell::new(false);
                let got = graph_cache.run(key, u64::from(fp), |_| {
                    ran.set(true);
                    Ok(())
                });
                self.caches.insert(stream, graph_cache);
                match got {
                    _ if ran.get() => return err("a cache hit ran its step"),
                    Ok(Served::Hit) => Ok(()),
                    Ok(served) => return err(format!("a cache hit was served {served:?}")),
                    Err(e) => Err(e),
                }
            }
        };
        check("a replay", expect, &got)?;
        let counted = replays(self)? - before;
        if counted != u64::from(got.is_ok()) {
            return err(format!(
                "a replay answered {got:?} and counted {counted} replays"
            ));
        }
        let graph = self.graph_at(which);
        let mut model = self.model.borrow_mut();
        match expect {
            Expect::Ok => {
                for w in &graph.works {
                    apply(&mut model, w);
                }
                for id in reads.iter().chain(writes.iter().map(|(id, _)| id)) {
                    model.users.entry(*id).or_default().insert(stream);
                }
                for (id, whole) in writes {
                    if whole && let Some(m) = model.mem.get_mut(&id) {
                        m.claim = None;
                    }
                }
            }
            _ => {
                let claim = if expect == Expect::Failed {
                    Claim::Replay(id)
                } else {
                    Claim::Other
                };
                for (id, _) in writes {
                    if let Some(m) = model.mem.get_mut(&id)
                        && !matches!(m.claim, Some(Claim::Other))
                    {
                        m.claim = Some(claim);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A launch a thread makes, planned before the threads start.
struct Planned {
    reads: Vec<BufferId>,
    writes: Vec<Bind>,
    resolved: Resolved,
    which: Option<Builtin>,
    handles: Vec<Buffer>,
    n: u32,
    scalar: (f32, f32),
}

impl<D: UserKernels> World<D> {
    /// The buffer `target` picks among those `allowed` lets through.
    fn bind_where(&self, target: Target, allowed: impl Fn(&Live) -> bool) -> Option<Bind> {
        let candidates: Vec<&Live> = self
            .buffers
            .iter()
            .filter(|b| b.alive() && allowed(b))
            .collect();
        let live = candidates.get(usize::from(target.buffer) % candidates.len().max(1))?;
        Some(Bind {
            id: live.id,
            part: target.part,
        })
    }

    /// `works` as launches on `stream` that write only its buffers and
    /// read those `readable` lets through.
    fn plan(
        &self,
        stream: StreamId,
        works: &[Work],
        readable: impl Fn(&Live) -> bool,
    ) -> Result<Vec<Planned>, Disagreement> {
        let own = |b: &Live| b.stream == stream;
        let mut plans = Vec::new();
        for work in works {
            let planned = match work {
                Work::Fill(t, v) => self.bind_where(*t, own).map(|b| Planned {
                    reads: vec![],
                    writes: vec![b],
                    resolved: Resolved::Fill(b, *v),
                    which: Some(Builtin::Fill),
                    handles: vec![],
                    n: b.range().len() as u32,
                    scalar: (*v, 0.0),
                }),
                Work::Add(x, y) => match (self.bind_where(*x, own), self.bind_where(*y, &readable))
                {
                    (Some(x), Some(y)) => Some(Planned {
                        reads: vec![x.id, y.id],
                        writes: vec![x],
                        resolved: Resolved::Add(x, y),
                        which: Some(Builtin::Add),
                        handles: vec![],
                        n: x.range().len().min(y.range().len()) as u32,
                        scalar: (0.0, 0.0),
                    }),
                    _ => None,
                },
                Work::Copy(src, dst) => {
                    match (self.bind_where(*src, &readable), self.bind_where(*dst, own)) {
                        (Some(src), Some(dst)) => Some(Planned {
                            reads: vec![src.id],
                            writes: vec![dst],
                            resolved: Resolved::Copy(src, dst),
                            which: Some(Builtin::Copy),
                            handles: vec![],
                            n: src.range().len().min(dst.range().len()) as u32,
                            scalar: (0.0, 0.0),
                        }),
                        _ => None,
                    }
                }
                Work::Scale(t, a, b) => self.bind_where(*t, own).map(|x| Planned {
                    reads: vec![x.id],
                    writes: vec![x],
                    resolved: Resolved::Scale(x, *a, *b),
                    which: None,
                    handles: vec![],
                    n: x.range().len() as u32,
                    scalar: (*a, *b),
                }),
                _ => None,
            };
            let unknown = planned.as_ref().is_some_and(|p| match &p.resolved {
                Resolved::Add(x, y) => {
                    !self.known(*x, p.n as usize) || !self.known(*y, p.n as usize)
                }
                Resolved::Copy(src, _) => !self.known(*src, p.n as usize),
                Resolved::Scale(x, ..) => !self.known(*x, ELEMENTS),
                _ => false,
            });
            if unknown {
                continue;
            }
            if let Some(mut planned) = planned {
                let binds: Vec<Bind> = match &planned.resolved {
                    Resolved::Fill(b, _) | Resolved::Scale(b, ..) => vec![*b],
                    Resolved::Add(x, y) | Resolved::Copy(x, y) => vec![*x, *y],
                    _ => vec![],
                };
                for bind in binds {
                    planned
                        .handles
                        .push(self.handle(bind).map_err(|e| format!("view: {e}"))?);
                }
                plans.push(planned);
            }
        }
        Ok(plans)
    }

    /// Two threads launching at once, then each launch checked against the
    /// model in the order the threads issued them (the first thread's all
    /// before the second's, which waits for them on the host).
    fn threads(
        &mut self,
        a: u8,
        b: u8,
        first: &[Work],
        second: &[Work],
    ) -> Result<(), Disagreement> {
        let (Some(a), Some(b)) = (self.stream(a), self.stream(b)) else {
            return Ok(());
        };
        // An armed fault would go to whichever thread launches first.
        if a == b || self.model.borrow().launch_fault {
            return Ok(());
        }
        let (sa, sb) = (self.streams[a].id, self.streams[b].id);
        let first = self.plan(sa, first, |live| live.stream == sa)?;
        let second = self.plan(sb, second, |_| true)?;
        let client = &self.client;
        let kernels = &self.kernels;
        let issue = |stream: StreamId, plans: &[Planned]| -> Vec<Result<(), Error>> {
            plans
                .iter()
                .map(|p| {
                    let handles: Vec<&Buffer> = p.handles.iter().collect();
                    match p.which {
                        Some(which) => client.run_builtin(stream, which, &handles, p.n, p.scalar.0),
                        None => kernels.scale(
                            client,
                            stream,
                            crate::workload::grid(p.n),
                            handles[0],
                            p.n,
                            p.scalar.0,
                            p.scalar.1,
                        ),
                    }
                })
                .collect()
        };
        let issued = std::sync::Barrier::new(2);
        let (got_first, got_second) = std::thread::scope(|scope| {
            let one = scope.spawn(|| {
                let got = issue(sa, &first);
                issued.wait();
                got
            });
            let two = scope.spawn(|| {
                issued.wait();
                issue(sb, &second)
            });
            (one.join(), two.join())
        });
        let (Ok(got_first), Ok(got_second)) = (got_first, got_second) else {
            return err("a thread panicked");
        };
        for (stream, plans, got) in [(sa, &first, got_first), (sb, &second, got_second)] {
            for (p, got) in plans.iter().zip(got) {
                self.commit(stream, p, &got)?;
            }
        }
        Ok(())
    }

    /// A thread's launch `p`, answered `got`: what the model expects of it
    /// now, and its effect.
    fn commit(
        &self,
        stream: StreamId,
        p: &Planned,
        got: &Result<(), Error>,
    ) -> Result<(), Disagreement> {
        let aliased = match &p.resolved {
            Resolved::Add(x, y) | Resolved::Copy(y, x) => x.overlaps(*y),
            _ => false,
        };
        if aliased {
            return check("an aliased launch on a thread", Expect::Refused, got);
        }
        let mut model = self.model.borrow_mut();
        let claimed = p
            .reads
            .iter()
            .any(|id| model.mem.get(id).is_some_and(|m| m.claim.is_some()));
        let expect = if claimed { Expect::Claimed } else { Expect::Ok };
        check("a launch on a thread", expect, got)?;
        if expect == Expect::Ok {
            for id in p.reads.iter().chain(p.writes.iter().map(|w| &w.id)) {
                model.users.entry(*id).or_default().insert(stream);
            }
            for w in &p.writes {
                if w.part == Part::Whole
                    && let Some(m) = model.mem.get_mut(&w.id)
                {
                    m.claim = None;
                }
            }
            apply(&mut model, &p.resolved);
        } else {
            for w in &p.writes {
                if let Some(m) = model.mem.get_mut(&w.id)
                    && !matches!(m.claim, Some(Claim::Other))
                {
                    m.claim = Some(Claim::Other);
                }
            }
        }
        Ok(())
    }
}

/// The model's foreign copy and fill on `client`'s device, or `None`
/// where the backend has no foreign operations.
fn foreign_ops<D: UserKernels>(
    client: &Client<Faulty<D>>,
) -> Result<Option<[Kernel<Faulty<D>>; 2]>, Disagreement> {
    use crate::workload::foreign::ForeignWork;
    let device = client.device();
    let (Some(copy), Some(fill)) = (
        Faulty::<D>::foreign_op(device, &ForeignWork::Copy),
        Faulty::<D>::foreign_op(device, &ForeignWork::Fill(FOREIGN_FILL)),
    ) else {
        return Ok(None);
    };
    let built = |k: Result<_, Error>| k.map(Kernel::new).map_err(|e| format!("foreign: {e}"));
    Ok(Some([built(copy)?, built(fill)?]))
}

/// The model's failing foreign operation, where the backend runs its code
/// while recording; `None` elsewhere (the host runs it as the work itself,
/// a fault of the stream, which the model does not follow).
fn failing_foreign_op<D: UserKernels>(
    client: &Client<Faulty<D>>,
) -> Result<Option<Kernel<Faulty<D>>>, Disagreement> {
    use crate::workload::foreign::ForeignWork;
    if !D::FOREIGN_FAILS_WHILE_RECORDING {
        return Ok(None);
    }
    match Faulty::<D>::foreign_op(client.device(), &ForeignWork::Fail) {
        None => Ok(None),
        Some(k) => k
            .map(|k| Some(Kernel::new(k)))
            .map_err(|e| format!("foreign: {e}")),
    }
}
