//! Our side: the chain through graph-capture's Vulkan backend, its kernel
//! WGSL built with bounds-checked accesses.

use std::time::{Duration, Instant};

use graph_capture::vulkan::Kernel as VulkanKernel;
use graph_capture::{
    Access, Buffer, Client, GraphHandle, Kernel, Params, Signature, StreamId, Vulkan,
};

use crate::shared::rows::Row;
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

/// The same, shaped as cubecl-wgpu 0.12 compiles its `#[cube]` kernel
/// (`CUBECL_DEBUG_LOG` shows it): the position linearized from the
/// workgroup's three dimensions, and the length read from a storage buffer
/// of metadata through two dependent loads, where ours takes it as a push
/// constant. The same work per element as cubecl's kernel, for a control row
/// that compares launches and not kernels.
const ADD_ONE_AS_CUBECL: &str = "
struct Info { scalars: array<u32, 4>, static_meta: array<u32, 6>, dynamic_meta: array<u32> }
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@group(0) @binding(2) var<storage, read> info: Info;

@compute @workgroup_size(256)
fn add_one(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let cube = group.z * groups.y * groups.x + group.y * groups.x + group.x;
    let pos = cube * 256u + local;
    let len = info.dynamic_meta[info.static_meta[2]];
    if (pos < len) {
        output[pos] = input[pos] + 1.0;
    }
}
";

/// Bytes of [`ADD_ONE_AS_CUBECL`]'s metadata: four scalars, six static
/// words, one dynamic word.
const CUBECL_INFO_BYTES: usize = 44;

/// Which of our two kernels the rows run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Ours: the length as a push constant.
    Ours,
    /// Shaped as cubecl's (see [`ADD_ONE_AS_CUBECL`]).
    AsCubecl,
}

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
    shape: Shape,
    state: Option<State>,
}

impl Ours {
    /// Open the device, or say why not, with the kernel of `shape`.
    pub fn open(shape: Shape) -> Result<Self, String> {
        let client = Client::<Vulkan>::open().map_err(|e| e.to_string())?;
        let stream = client.create_stream().map_err(|e| e.to_string())?;
        let signature = Signature::new("add_one")
            .binding(Access::Read)
            .binding(Access::Write)
            .workgroup([WORKGROUP, 1, 1]);
        let (signature, source) = match shape {
            Shape::Ours => (signature.param(4), ADD_ONE),
            Shape::AsCubecl => (signature.info(CUBECL_INFO_BYTES as u32), ADD_ONE_AS_CUBECL),
        };
        let kernel = VulkanKernel::from_wgsl_checked(client.device(), source, "add_one", signature)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            stream,
            kernel: Kernel::new(kernel),
            shape,
            state: None,
        })
    }

    fn pass(&self, a: &Buffer, b: &Buffer, row: Row) -> Result<(), graph_capture::Error> {
        for i in 0..row.kernels {
            let (src, dst) = if i % 2 == 0 { (a, b) } else { (b, a) };
            self.launch_one(self.stream, src, dst, row.elems)?;
        }
        Ok(())
    }

    /// One add-one from `src` into `dst`, both `elems` floats, on `stream`.
    pub fn launch_one(
        &self,
        stream: StreamId,
        src: &Buffer,
        dst: &Buffer,
        elems: usize,
    ) -> Result<(), graph_capture::Error> {
        let groups = [(elems as u32).div_ceil(WORKGROUP), 1, 1];
        let n = elems as u32;
        match self.shape {
            Shape::Ours => {
                let params = Params::new().u32(n);
                self.client.launch(
                    stream,
                    &self.kernel,
                    groups,
                    &[src, dst],
                    &[],
                    params.as_bytes(),
                )
            }
            Shape::AsCubecl => {
                // cubecl's metadata: the length at dynamic word 0, which
                // static word 2 names.
                let mut info = [0u8; CUBECL_INFO_BYTES];
                info[40..].copy_from_slice(&n.to_le_bytes());
                self.client
                    .launch(stream, &self.kernel, groups, &[src, dst], &info, &[])
            }
        }
    }

    /// The client, for the memory comparison.
    pub fn client(&self) -> &Client<Vulkan> {
        &self.client
    }
}

impl Side for Ours {
    fn describe(&self) -> String {
        let info = self.client.device_info();
        let kernel = match self.shape {
            Shape::Ours => "our kernel",
            Shape::AsCubecl => "a kernel shaped as cubecl's",
        };
        format!(
            "graph-capture (Vulkan), {kernel}, {}, {}",
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
