//! Our side: the chain through graph-capture's Vulkan backend, its kernel
//! WGSL built with bounds-checked accesses.

use std::time::{Duration, Instant};

use graph_capture::vulkan::Kernel as VulkanKernel;
use graph_capture::{
    Access, Buffer, Client, GraphHandle, Kernel, Params, Signature, StreamId, Vulkan,
};

use crate::rows::Row;
use crate::side::Side;

/// Threads per workgroup, as cubecl's bench launches.
pub const WORKGROUP: u32 = 256;

/// `output[i] = input[i] + 1` for `i < n`.
const ADD_ONE: &str = "
struct Params { n: u32 }
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
var<immediate> p: Params;

@compute @workgroup_size(256)
fn add_one(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < p.n) {
        output[gid.x] = input[gid.x] + 1.0;
    }
}
";

struct State {
    a: Buffer,
    b: Buffer,
    graph: GraphHandle<Vulkan>,
    row: Row,
}

/// graph-capture on the Vulkan device it opens.
pub struct Ours {
    client: Client<Vulkan>,
    stream: StreamId,
    kernel: Kernel<Vulkan>,
    state: Option<State>,
}

impl Ours {
    /// Open the device, or say why not.
    pub fn open() -> Result<Self, String> {
        let client = Client::<Vulkan>::open().map_err(|e| e.to_string())?;
        let stream = client.create_stream().map_err(|e| e.to_string())?;
        let signature = Signature::new("add_one")
            .binding(Access::Read)
            .binding(Access::Write)
            .param(4)
            .workgroup([WORKGROUP, 1, 1]);
        let kernel =
            VulkanKernel::from_wgsl_checked(client.device(), ADD_ONE, "add_one", signature)
                .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            stream,
            kernel: Kernel::new(kernel),
            state: None,
        })
    }

    fn pass(&self, a: &Buffer, b: &Buffer, row: Row) -> Result<(), graph_capture::Error> {
        let groups = [(row.elems as u32).div_ceil(WORKGROUP), 1, 1];
        let params = Params::new().u32(row.elems as u32);
        for i in 0..row.kernels {
            let (src, dst) = if i % 2 == 0 { (a, b) } else { (b, a) };
            self.client.launch(
                self.stream,
                &self.kernel,
                groups,
                &[src, dst],
                &[],
                params.as_bytes(),
            )?;
        }
        Ok(())
    }

    /// The client, for the memory comparison.
    pub fn client(&self) -> &Client<Vulkan> {
        &self.client
    }

    /// The add-one kernel.
    pub fn kernel(&self) -> &Kernel<Vulkan> {
        &self.kernel
    }
}

impl Side for Ours {
    fn describe(&self) -> String {
        let info = self.client.device_info();
        format!(
            "graph-capture (Vulkan), {}, {}",
            info.name, info.driver_version
        )
    }

    fn setup(&mut self, row: Row) -> Result<Duration, String> {
        let err = |e: graph_capture::Error| e.to_string();
        let client = &self.client;
        let a = client
            .create_f32(self.stream, &vec![0.0; row.elems])
            .map_err(err)?;
        let b = client
            .create_f32(self.stream, &vec![0.0; row.elems])
            .map_err(err)?;
        self.pass(&a, &b, row).map_err(err)?;
        self.sync_on(&a)?;
        // As cubecl's: prepare, a warmup pass, then the recorded pass; the
        // time is the call that ends the recording and makes the graph.
        let window = client.prepare(self.stream).map_err(err)?;
        self.pass(&a, &b, row).map_err(err)?;
        self.sync_on(&a)?;
        client.begin(self.stream, window).map_err(err)?;
        self.pass(&a, &b, row).map_err(err)?;
        let start = Instant::now();
        let graph = client.instantiate(self.stream, window).map_err(err)?;
        let capture = start.elapsed();
        graph.replay().map_err(err)?;
        self.sync_on(&a)?;
        self.state = Some(State { a, b, graph, row });
        Ok(capture)
    }

    fn eager(&self) {
        let state = self.state.as_ref().expect("a row set up");
        self.pass(&state.a, &state.b, state.row)
            .expect("an eager pass");
    }

    fn replay(&self) {
        let state = self.state.as_ref().expect("a row set up");
        state.graph.replay().expect("a replay");
    }

    fn sync(&self) {
        let a = self.state.as_ref().expect("a row set up").a.clone();
        self.sync_on(&a).expect("a sync");
    }

    fn outputs(&mut self) -> Result<[Vec<f32>; 2], String> {
        let state = self.state.as_ref().ok_or("no row")?;
        let read = |buffer: &Buffer| self.client.read_f32(buffer).map_err(|e| e.to_string());
        Ok([read(&state.a)?, read(&state.b)?])
    }

    fn teardown(&mut self) {
        self.state = None;
        let _ = self.client.sync(self.stream);
    }
}

impl Ours {
    fn sync_on(&self, buffer: &Buffer) -> Result<(), String> {
        self.client
            .read(buffer)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
