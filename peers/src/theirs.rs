//! cubecl's side: the same chain through cubecl 0.12's wgpu runtime, with
//! its own `#[cube]` kernel, captured and replayed with
//! its graph API, exactly as its own `graph_bench` example does.

use std::time::{Duration, Instant};

use cubecl_core as cubecl;
use cubecl_core::prelude::*;
use cubecl_core::server::Handle;
use cubecl_runtime::client::Graph;
use cubecl_runtime::memory_management::MemoryScope;

use crate::shared::rows::Row;
use crate::side::Side;

/// Threads per cube, as cubecl's bench launches.
const CUBE_DIM: u32 = 256;

#[cube(launch)]
fn add_one_tensor(input: &Tensor<f32>, output: &mut Tensor<f32>) {
    if ABSOLUTE_POS < input.shape(0) {
        output[ABSOLUTE_POS] = input[ABSOLUTE_POS] + 1.0;
    }
}

struct State {
    a: Handle,
    b: Handle,
    graph: Graph,
    row: Row,
}

/// A cubecl client on its runtime's default device.
pub struct Theirs {
    client: Client,
    runtime: &'static str,
    state: Option<State>,
}

impl Theirs {
    /// cubecl's wgpu runtime on its default adapter.
    pub fn wgpu() -> Self {
        use cubecl_server::runtime::Runtime;
        Self {
            client: <cubecl_wgpu::WgpuRuntime>::client(&Default::default()),
            runtime: "wgpu",
            state: None,
        }
    }

    /// The client, for the memory comparison.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Bytes cubecl's pools hold on the device, every stream together.
    pub fn reserved_bytes(&self) -> u64 {
        self.client
            .memory_report(MemoryScope::Device)
            .usage()
            .bytes_reserved
    }

    fn pass(&self, a: &Handle, b: &Handle, row: Row) {
        pass(&self.client, a, b, row.elems, row.kernels);
    }
}

/// A chain of `kernels` add-ones over `elems` elements, `a` to `b` and back.
fn pass(client: &Client, a: &Handle, b: &Handle, elems: usize, kernels: usize) {
    for i in 0..kernels {
        let (src, dst) = if i % 2 == 0 { (a, b) } else { (b, a) };
        launch_one(client, src, dst, elems);
    }
}

/// One add-one from `src` into `dst`, both `elems` floats.
pub fn launch_one(client: &Client, src: &Handle, dst: &Handle, elems: usize) {
    let cubes = elems.div_ceil(CUBE_DIM as usize) as u32;
    add_one_tensor::launch(
        client,
        CubeCount::Static(cubes, 1, 1),
        CubeDim::new_1d(CUBE_DIM),
        // SAFETY: contiguous rank-1 buffers of exactly `elems` f32
        // elements, matching the declared shape and strides.
        unsafe { TensorArg::from_raw_parts(src.clone(), [1].into(), [elems].into()) },
        // SAFETY: as above.
        unsafe { TensorArg::from_raw_parts(dst.clone(), [1].into(), [elems].into()) },
    );
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl Side for Theirs {
    fn describe(&self) -> String {
        format!(
            "cubecl 0.12.0-pre.1 ({}), {}",
            self.runtime,
            self.client.name()
        )
    }

    fn setup(&mut self, row: Row) -> Result<Duration, String> {
        let client = &self.client;
        let zeros = vec![0.0f32; row.elems];
        let a = client.create_from_slice(f32::as_bytes(&zeros));
        let b = client.create_from_slice(f32::as_bytes(&zeros));
        self.pass(&a, &b, row);
        client.read_one(a.clone()).map_err(|e| format!("{e:?}"))?;
        client.graph_prepare().map_err(|e| format!("{e:?}"))?;
        self.pass(&a, &b, row);
        client.read_one(a.clone()).map_err(|e| format!("{e:?}"))?;
        client.start_capture().map_err(|e| format!("{e:?}"))?;
        self.pass(&a, &b, row);
        let start = Instant::now();
        let graph = client.stop_capture().map_err(|e| format!("{e:?}"))?;
        let capture = start.elapsed();
        // SAFETY: `a` and `b` live as long as the graph (both are in the
        // state, dropped together), and only this client's stream uses them.
        unsafe { graph.replay() }.map_err(|e| format!("{e:?}"))?;
        client.read_one(a.clone()).map_err(|e| format!("{e:?}"))?;
        self.state = Some(State { a, b, graph, row });
        Ok(capture)
    }

    fn eager(&self) {
        let state = self.state.as_ref().expect("a row set up");
        self.pass(&state.a, &state.b, state.row);
    }

    fn replay(&self) {
        let state = self.state.as_ref().expect("a row set up");
        // SAFETY: as in `setup`.
        unsafe { state.graph.replay() }.expect("a replay");
    }

    fn sync(&self) {
        let state = self.state.as_ref().expect("a row set up");
        self.client.read_one(state.a.clone()).expect("a sync");
    }

    fn outputs(&mut self) -> Result<[Vec<f32>; 2], String> {
        let state = self.state.as_ref().ok_or("no row")?;
        let read = |h: &Handle| {
            self.client
                .read_one(h.clone())
                .map(|bytes| floats(&bytes))
                .map_err(|e| format!("{e:?}"))
        };
        Ok([read(&state.a)?, read(&state.b)?])
    }

    fn teardown(&mut self) {
        // The graph first: it holds raw pointers into the buffers.
        if let Some(State { a, b, graph, .. }) = self.state.take() {
            drop(graph);
            drop((a, b));
        }
    }
}
