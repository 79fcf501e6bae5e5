//! A reference all-reduce across host devices, as foreign work: each rank's
//! operation adds its buffer into a shared sum where the ranks' stream
//! workers meet, and takes the sum back, as a collectives library's kernels
//! meet across GPUs. The library orders each rank's work around its
//! operation (hazards, claims, its graph's edges); the rendezvous orders
//! the ranks among themselves, as NCCL does.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use graph_capture::host::Kernel;
use graph_capture::{Access, Error};

/// How long a rank waits for its peers before it fails: a peer that never
/// comes (its call refused, its replay never made) fails the others rather
/// than hanging them.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Where the ranks of one group meet.
pub struct Rendezvous {
    ranks: usize,
    state: Mutex<State>,
    turned: Condvar,
}

#[derive(Default)]
struct State {
    sum: Vec<f32>,
    arrived: usize,
    /// Completed rounds; a waiting rank leaves when this moves on.
    round: u64,
    result: Arc<Vec<f32>>,
    /// Why the group gave up: every rank's later operation fails with it.
    abandoned: Option<String>,
}

impl Rendezvous {
    /// A group of `ranks` ranks.
    pub fn new(ranks: usize) -> Arc<Self> {
        Arc::new(Self {
            ranks,
            state: Mutex::new(State::default()),
            turned: Condvar::new(),
        })
    }

    /// Give up on the group, as a collectives library's communicator does
    /// once a rank fails: ranks waiting, and every operation after, fail.
    pub fn abandon(&self, why: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.abandoned.get_or_insert_with(|| why.to_string());
        self.turned.notify_all();
    }

    /// Rank `rank`'s all-reduce of `x`: the ranks' sum, once all came.
    fn all_reduce(&self, rank: usize, x: &mut [f32]) -> Result<(), String> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| "the rendezvous is poisoned")?;
        if let Some(why) = &state.abandoned {
            return Err(format!("rank {rank}: the all-reduce was abandoned: {why}"));
        }
        if state.arrived == 0 {
            state.sum = vec![0.0; x.len()];
        } else if state.sum.len() != x.len() {
            return Err(format!(
                "rank {rank} brings {} elements, its peers {}",
                x.len(),
                state.sum.len()
            ));
        }
        for (sum, value) in state.sum.iter_mut().zip(x.iter()) {
            *sum += *value;
        }
        state.arrived += 1;
        if state.arrived == self.ranks {
            state.result = Arc::new(std::mem::take(&mut state.sum));
            state.arrived = 0;
            state.round += 1;
            self.turned.notify_all();
        } else {
            let round = state.round;
            let (waited, timeout) = self
                .turned
                .wait_timeout_while(state, PATIENCE, |s| {
                    s.round == round && s.abandoned.is_none()
                })
                .map_err(|_| "the rendezvous is poisoned")?;
            state = waited;
            if state.round == round {
                return Err(match &state.abandoned {
                    Some(why) => format!("rank {rank}: the all-reduce was abandoned: {why}"),
                    None if timeout.timed_out() => {
                        format!("rank {rank} waited {PATIENCE:?} for its peers")
                    }
                    None => format!("rank {rank} left the rendezvous early"),
                });
            }
        }
        x.copy_from_slice(&state.result);
        Ok(())
    }

    /// Rank `rank`'s all-reduce as a foreign operation over one buffer,
    /// summed in place on every rank.
    pub fn op(self: &Arc<Self>, rank: usize) -> Result<Kernel, Error> {
        let group = Arc::clone(self);
        Kernel::foreign("all_reduce", &[Access::ReadWrite], move |views| {
            let [x] = views else {
                return Err("all_reduce declares one buffer".into());
            };
            group.all_reduce(rank, x.f32_mut()?)
        })
    }
}
