//! Model-based randomized test: random sequences of allocate, drop, write,
//! read, launch, prepare, begin, instantiate, replay, destroy and sync on two
//! streams, with driver refusals injected at random, checked after every
//! step against a small model of what must hold:
//!
//! - no stream is left recording after `instantiate`, and a refused `begin`
//!   leaves it as found;
//! - a buffer the model says is claimed fails its read with the claim, and
//!   one it says is not never does (every refusal's written set is claimed);
//! - no new allocation shares memory with a live buffer or with anything a
//!   live graph pins;
//! - once every graph and buffer is gone, pool usage is back to zero and no
//!   executable is alive.

use std::collections::HashSet;

use backend_host::Host;
use capture_core::{
    Buffer, BufferId, Builtin, Client, Driver, Error, GraphHandle, Phase, Placement, StreamId,
    WindowId,
};
use conformance::{Faulty, Primitive, Session};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Alloc { stream: usize, floats: u8 },
    Drop { which: usize },
    Write { which: usize, value: i8 },
    Read { which: usize },
    Launch { kernel: u8, a: usize, b: usize },
    Prepare { stream: usize },
    Begin { stream: usize },
    Instantiate { stream: usize, stale: bool },
    Replay { which: usize },
    Destroy { which: usize },
    Sync { stream: usize },
    Fault { primitive: usize, k: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    let idx = 0usize..64;
    prop_oneof![
        4 => (0usize..2, 1u8..=64).prop_map(|(stream, floats)| Step::Alloc { stream, floats }),
        1 => idx.clone().prop_map(|which| Step::Drop { which }),
        2 => (idx.clone(), any::<i8>()).prop_map(|(which, value)| Step::Write { which, value }),
        2 => idx.clone().prop_map(|which| Step::Read { which }),
        4 => (0u8..4, idx.clone(), idx.clone()).prop_map(|(kernel, a, b)| Step::Launch { kernel, a, b }),
        2 => (0usize..2).prop_map(|stream| Step::Prepare { stream }),
        2 => (0usize..2).prop_map(|stream| Step::Begin { stream }),
        2 => (0usize..2, prop::bool::weighted(0.1)).prop_map(|(stream, stale)| Step::Instantiate { stream, stale }),
        3 => idx.clone().prop_map(|which| Step::Replay { which }),
        1 => idx.clone().prop_map(|which| Step::Destroy { which }),
        1 => (0usize..2).prop_map(|stream| Step::Sync { stream }),
        1 => (0usize..8, 1u8..=3).prop_map(|(primitive, k)| Step::Fault { primitive, k }),
    ]
}

struct LiveBuffer {
    buffer: Buffer,
    stream: usize,
    floats: u32,
}

struct Window {
    id: WindowId,
    recording: bool,
    doomed: bool,
    written: Vec<BufferId>,
    pinned: Vec<Placement>,
}

struct LiveGraph {
    handle: GraphHandle<Faulty<Host>>,
    stream: usize,
    written: Vec<BufferId>,
    pinned: Vec<Placement>,
}

struct Model {
    client: Client<Faulty<Host>>,
    streams: [StreamId; 2],
    buffers: Vec<LiveBuffer>,
    claimed: HashSet<BufferId>,
    windows: [Option<Window>; 2],
    stale: [Option<WindowId>; 2],
    graphs: Vec<LiveGraph>,
    /// Pins of graphs destroyed while their stream recorded: released when
    /// that window closes.
    deferred: Vec<(usize, Vec<Placement>)>,
}

impl Model {
    fn recording(&self, stream: usize) -> bool {
        self.windows[stream].as_ref().is_some_and(|w| w.recording)
    }

    fn phase(&self, stream: usize) -> Phase {
        match &self.windows[stream] {
            None => Phase::None,
            Some(w) if w.recording => Phase::Recording(w.id),
            Some(w) => Phase::Prepared(w.id),
        }
    }

    fn claim(&mut self, ids: &[BufferId]) {
        self.claimed.extend(ids.iter().copied());
    }

    fn clear(&mut self, ids: &[BufferId]) {
        for id in ids {
            self.claimed.remove(id);
        }
    }

    fn pick(&self, which: usize) -> Option<usize> {
        (!self.buffers.is_empty()).then(|| which % self.buffers.len())
    }

    fn check_phases(&self) -> Result<(), TestCaseError> {
        for s in 0..2 {
            let phase = self
                .client
                .phase(self.streams[s])
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(phase, self.phase(s), "stream {} phase", s);
        }
        Ok(())
    }

    fn apply(&mut self, step: &Step, plan: &conformance::FaultPlan) -> Result<(), TestCaseError> {
        match *step {
            Step::Alloc { stream, floats } => {
                let len = u64::from(floats) * 4;
                if let Ok(buffer) = self.client.allocate(self.streams[stream], len) {
                    let placement = buffer.placement();
                    for live in &self.buffers {
                        prop_assert!(
                            !live.buffer.placement().overlaps(&placement),
                            "shares a live buffer's memory"
                        );
                    }
                    let pinned = self
                        .graphs
                        .iter()
                        .flat_map(|g| g.pinned.iter())
                        .chain(self.deferred.iter().flat_map(|(_, p)| p.iter()))
                        .chain(self.windows.iter().flatten().flat_map(|w| w.pinned.iter()));
                    for pin in pinned {
                        prop_assert!(
                            !pin.overlaps(&placement),
                            "a new allocation shares memory a graph pins"
                        );
                    }
                    if let Some(window) = self.windows[stream].as_mut().filter(|w| w.recording) {
                        window.pinned.push(placement);
                    }
                    self.buffers.push(LiveBuffer {
                        buffer,
                        stream,
                        floats: u32::from(floats),
                    });
                }
            }
            Step::Drop { which } => {
                if let Some(i) = self.pick(which) {
                    let gone = self.buffers.swap_remove(i);
                    self.claimed.remove(&gone.buffer.id());
                }
            }
            Step::Write { which, value } => {
                let Some(i) = self.pick(which) else {
                    return Ok(());
                };
                let (id, stream, floats) = {
                    let b = &self.buffers[i];
                    (b.buffer.id(), b.stream, b.floats)
                };
                let values = vec![f32::from(value); floats as usize];
                let result = self.client.write_f32(&self.buffers[i].buffer, &values);
                let placement = self.buffers[i].buffer.placement();
                match result {
                    Ok(()) if self.recording(stream) => {
                        if let Some(w) = self.windows[stream].as_mut() {
                            w.written.push(id);
                            w.pinned.push(placement);
                        }
                    }
                    Ok(()) => self.clear(&[id]),
                    Err(_) => {
                        self.claim(&[id]);
                        if let Some(w) = self.windows[stream].as_mut().filter(|w| w.recording) {
                            w.doomed = true;
                        }
                    }
                }
            }
            Step::Read { which } => {
                let Some(i) = self.pick(which) else {
                    return Ok(());
                };
                let b = &self.buffers[i];
                let result = self.client.read(&b.buffer);
                if self.recording(b.stream) {
                    prop_assert!(
                        matches!(result, Err(Error::SyncWhileRecording(_))),
                        "read while recording: {:?}",
                        result.err()
                    );
                } else if self.claimed.contains(&b.buffer.id()) {
                    prop_assert!(
                        matches!(result, Err(Error::Claimed { .. })),
                        "a claimed buffer was read: {:?}",
                        result.map(|v| v.len())
                    );
                } else {
                    prop_assert!(
                        !matches!(result, Err(Error::Claimed { .. })),
                        "an unclaimed buffer failed as claimed: {:?}",
                        result.err()
                    );
                }
            }
            Step::Launch { kernel, a, b } => {
                let Some(a) = self.pick(a) else { return Ok(()) };
                let stream = self.buffers[a].stream;
                let partner = self
                    .pick(b)
                    .filter(|&b| b != a && self.buffers[b].stream == stream);
                let (builtin, picks): (Builtin, Vec<usize>) = match (kernel, partner) {
                    (1, Some(b)) => (Builtin::Add, vec![a, b]),
                    (2, Some(b)) => (Builtin::Copy, vec![a, b]),
                    (3, Some(b)) => (Builtin::Axpy, vec![a, b]),
                    _ => (Builtin::Fill, vec![a]),
                };
                let n = picks
                    .iter()
                    .map(|&i| self.buffers[i].floats)
                    .min()
                    .unwrap_or(1);
                let refs: Vec<&Buffer> = picks.iter().map(|&i| &self.buffers[i].buffer).collect();
                let result = self
                    .client
                    .run_builtin(self.streams[stream], builtin, &refs, n, 1.5);
                let outputs: Vec<BufferId> = picks
                    .iter()
                    .zip(builtin.accesses())
                    .filter(|(_, access)| access.writes())
                    .map(|(&i, _)| self.buffers[i].buffer.id())
                    .collect();
                let placements: Vec<Placement> = picks
                    .iter()
                    .map(|&i| self.buffers[i].buffer.placement())
                    .collect();
                match result {
                    Ok(()) if self.recording(stream) => {
                        if let Some(w) = self.windows[stream].as_mut() {
                            w.written.extend(&outputs);
                            w.pinned.extend(placements);
                        }
                    }
                    Ok(()) => self.clear(&outputs),
                    Err(_) => {
                        self.claim(&outputs);
                        if let Some(w) = self.windows[stream].as_mut().filter(|w| w.recording) {
                            w.doomed = true;
                        }
                    }
                }
            }
            Step::Prepare { stream } => {
                let result = self.client.prepare(self.streams[stream]);
                match result {
                    Ok(id) => {
                        prop_assert!(
                            self.windows[stream].is_none(),
                            "prepare accepted over an open window"
                        );
                        self.windows[stream] = Some(Window {
                            id,
                            recording: false,
                            doomed: false,
                            written: vec![],
                            pinned: vec![],
                        });
                    }
                    Err(_) => prop_assert!(
                        self.windows[stream].is_some(),
                        "prepare refused on an idle stream"
                    ),
                }
            }
            Step::Begin { stream } => {
                let id = self.windows[stream]
                    .as_ref()
                    .map_or(WindowId(u64::MAX), |w| w.id);
                let result = self.client.begin(self.streams[stream], id);
                match (result, self.windows[stream].as_ref().map(|w| w.recording)) {
                    (Ok(()), Some(false)) => {
                        if let Some(w) = self.windows[stream].as_mut() {
                            w.recording = true;
                        }
                    }
                    (Ok(()), other) => prop_assert!(false, "begin accepted in state {:?}", other),
                    // A driver refusal (or a failed drain) unwinds to None.
                    (Err(Error::Driver(_)), Some(false)) => self.windows[stream] = None,
                    (Err(_), _) => {}
                }
            }
            Step::Instantiate { stream, stale } => {
                let closer = match (stale, &self.windows[stream], self.stale[stream]) {
                    (true, _, Some(old)) => old,
                    (_, Some(w), _) => w.id,
                    _ => WindowId(u64::MAX),
                };
                let result = self.client.instantiate(self.streams[stream], closer);
                let window = self.windows[stream].take();
                match window {
                    Some(w) if w.recording => {
                        self.stale[stream] = Some(w.id);
                        let foreign = closer != w.id;
                        match result {
                            Ok(handle) => {
                                prop_assert!(
                                    !foreign && !w.doomed,
                                    "a graph from a doomed or foreign close"
                                );
                                self.graphs.push(LiveGraph {
                                    handle,
                                    stream,
                                    written: w.written,
                                    pinned: w.pinned,
                                });
                            }
                            Err(_) => self.claim(&w.written),
                        }
                        self.deferred.retain(|(s, _)| *s != stream);
                    }
                    Some(w) => {
                        self.stale[stream] = Some(w.id);
                        prop_assert!(result.is_err(), "a graph from a window that never began");
                    }
                    None => prop_assert!(result.is_err(), "a graph with no window"),
                }
            }
            Step::Replay { which } => {
                if self.graphs.is_empty() {
                    return Ok(());
                }
                let g = which % self.graphs.len();
                let stream = self.graphs[g].stream;
                let result = self.client.replay(&self.graphs[g].handle);
                let written = self.graphs[g].written.clone();
                match result {
                    Ok(()) => {
                        prop_assert!(!self.recording(stream), "a replay accepted while recording");
                        self.clear(&written);
                    }
                    Err(Error::ReplayWhileRecording(_)) => prop_assert!(self.recording(stream)),
                    Err(_) => self.claim(&written),
                }
            }
            Step::Destroy { which } => {
                if self.graphs.is_empty() {
                    return Ok(());
                }
                let g = self.graphs.swap_remove(which % self.graphs.len());
                if self.recording(g.stream) {
                    self.deferred.push((g.stream, g.pinned.clone()));
                }
                drop(g.handle);
            }
            Step::Sync { stream } => {
                let result = self.client.sync(self.streams[stream]);
                if self.recording(stream) {
                    prop_assert!(matches!(result, Err(Error::SyncWhileRecording(_))));
                }
            }
            Step::Fault { primitive, k } => plan.fail(Primitive::ALL[primitive], u64::from(k)),
        }
        self.check_phases()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn capture_bookkeeping_holds_under_random_sequences(steps in prop::collection::vec(step(), 1..40)) {
        let device = Host::open().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let session = Session::<Host>::new(device);
        let (client, plan) = session.faulty();
        let streams = [
            client.create_stream().map_err(|e| TestCaseError::fail(e.to_string()))?,
            client.create_stream().map_err(|e| TestCaseError::fail(e.to_string()))?,
        ];
        let mut model = Model {
            client,
            streams,
            buffers: Vec::new(),
            claimed: HashSet::new(),
            windows: [None, None],
            stale: [None, None],
            graphs: Vec::new(),
            deferred: Vec::new(),
        };
        for step in &steps {
            model.apply(step, &plan)?;
        }
        // Tear down: close windows, drop everything, and check nothing is
        // left behind.
        plan.disarm();
        for s in 0..2 {
            if model.windows[s].is_some() {
                let id = model.windows[s].as_ref().map_or(WindowId(0), |w| w.id);
                drop(model.client.instantiate(model.streams[s], id));
                model.windows[s] = None;
            }
        }
        model.graphs.clear();
        model.buffers.clear();
        for s in 0..2 {
            model.client.sync(model.streams[s]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let usage = model.client.usage(model.streams[s]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let info = usage.info_entries as u64 * capture_core::SLICE_ALIGN;
            // The stream keeps its temporaries' arena for its next window.
            let kept = info + usage.temporary_arena_bytes;
            prop_assert_eq!(usage.device.in_use_bytes, kept, "device memory left in use: {:?}", usage);
            prop_assert_eq!(usage.host.in_use_bytes, 0, "host memory left in use: {:?}", usage);
            model.client.trim(model.streams[s]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let usage = model.client.usage(model.streams[s]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(usage.temporary_arena_bytes, 0, "trim lets the arena go: {:?}", usage);
            prop_assert_eq!(usage.device.in_use_bytes, info, "device memory left in use: {:?}", usage);
        }
        prop_assert_eq!(model.client.lingering_buffers(), 0, "nothing uses a dropped buffer's memory");
        prop_assert_eq!(model.client.live_graphs(), 0);
        prop_assert_eq!(plan.live_executables(), 0, "executables leaked");
    }
}
