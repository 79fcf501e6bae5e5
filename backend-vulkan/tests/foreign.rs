//! Foreign operations with the caller's own Vulkan objects: a compute
//! pipeline made with `ash`, dispatched through a descriptor set of the
//! caller's pool, and `vkCmdFillBuffer`, `vkCmdCopyBuffer` and
//! `vkCmdUpdateBuffer`, all inside one graph with launches of ours,
//! replayed a hundred times. CI runs it under synchronization validation,
//! which must report nothing. Skips, saying why, without a Vulkan device.

use std::sync::{Arc, Mutex};

mod common;

use ash::vk;
use backend_vulkan::{Device, ForeignCommands, Kernel, Vulkan, validation_counts};
use capture_core::{Access, Builtin, Client, Kernel as CoreKernel};
use common::scale_pipeline;

const N: usize = 1000;

/// The caller's objects, destroyed once every graph and kernel holding
/// them is gone; the device, held here, outlives them.
struct Callers {
    device: Arc<Device>,
    pipeline: vk::Pipeline,
    layout: vk::PipelineLayout,
    set_layout: vk::DescriptorSetLayout,
    pool: Mutex<vk::DescriptorPool>,
}

impl Callers {
    fn new(device: &Arc<Device>) -> Self {
        let raw = device.raw();
        let (pipeline, layout, set_layout) = scale_pipeline(raw);
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(64)];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(64)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info.
        let pool = unsafe { raw.create_descriptor_pool(&info, None) }.expect("a pool");
        Self {
            device: Arc::clone(device),
            pipeline,
            layout,
            set_layout,
            pool: Mutex::new(pool),
        }
    }

    /// `x = x * a + b` through the caller's pipeline, recorded into `c`.
    fn scale(&self, c: &ForeignCommands<'_>, a: f32, b: f32) -> Result<(), String> {
        let [x] = c.buffers else {
            return Err("scale declares one buffer".into());
        };
        let pool = *self.pool.lock().map_err(|_| "the pool's lock")?;
        let layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool)
            .set_layouts(&layouts);
        // SAFETY: the pool and layout are the caller's, alive; the lock
        // keeps the pool to one thread.
        let set =
            unsafe { c.device.allocate_descriptor_sets(&info) }.map_err(|e| format!("{e:?}"))?[0];
        let buffers = [vk::DescriptorBufferInfo::default()
            .buffer(x.buffer)
            .offset(x.offset)
            .range(x.len)];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&buffers);
        let n = (x.len / 4) as u32;
        let mut push = Vec::with_capacity(12);
        push.extend(n.to_le_bytes());
        push.extend(a.to_le_bytes());
        push.extend(b.to_le_bytes());
        // SAFETY: a fresh set of the layout, naming the declared range; the
        // pipeline reads and writes only x[i] for i < n, inside it; the
        // set and pipeline live as long as the kernel and its graphs.
        unsafe {
            c.device.update_descriptor_sets(&[write], &[]);
            let cmd = c.command_buffer;
            c.device
                .cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            c.device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[set],
                &[],
            );
            c.device
                .cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
            c.device.cmd_dispatch(cmd, n.div_ceil(64), 1, 1);
        }
        Ok(())
    }
}

impl Drop for Callers {
    fn drop(&mut self) {
        let raw = self.device.raw();
        let pool = *self.pool.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every kernel and graph that recorded these is gone, and
        // the client synced: nothing pending uses them.
        unsafe {
            raw.destroy_descriptor_pool(pool, None);
            raw.destroy_pipeline(self.pipeline, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

#[test]
fn the_callers_pipeline_and_transfer_commands_replay_a_hundred_times() {
    let client = match Client::<Vulkan>::open() {
        Ok(client) => client,
        Err(err) => {
            println!("skipped: {err}");
            return;
        }
    };
    let device = Arc::clone(client.device());
    let callers = Arc::new(Callers::new(&device));
    let ramp: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let bytes: Vec<u8> = ramp.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mine = Arc::clone(&callers);
    let scale = move |c: &ForeignCommands<'_>| mine.scale(c, 2.0, 1.0);
    let fill = |c: &ForeignCommands<'_>| {
        let [z] = c.buffers else {
            return Err("fill declares one buffer".into());
        };
        let cmd = c.command_buffer;
        // SAFETY: the declared range, 4-aligned, a multiple of 4 bytes.
        unsafe {
            c.device
                .cmd_fill_buffer(cmd, z.buffer, z.offset, z.len, 7.0f32.to_bits())
        };
        Ok(())
    };
    let copy = |c: &ForeignCommands<'_>| {
        let [src, dst] = c.buffers else {
            return Err("copy declares two buffers".into());
        };
        let region = vk::BufferCopy::default()
            .src_offset(src.offset)
            .dst_offset(dst.offset)
            .size(src.len.min(dst.len));
        // SAFETY: both declared ranges, as declared.
        unsafe {
            c.device
                .cmd_copy_buffer(c.command_buffer, src.buffer, dst.buffer, &[region])
        };
        Ok(())
    };
    let update = move |c: &ForeignCommands<'_>| {
        let [x] = c.buffers else {
            return Err("update declares one buffer".into());
        };
        // SAFETY: 4,000 bytes, at most 65,536, into the declared range.
        unsafe {
            c.device
                .cmd_update_buffer(c.command_buffer, x.buffer, x.offset, &bytes)
        };
        Ok(())
    };
    // SAFETY: each operation's commands touch only the declared ranges as
    // declared, and record into the command buffer they are given; the
    // caller's objects live as long as the kernels.
    let kernels = unsafe {
        [
            Kernel::foreign(&device, "callers_scale", &[Access::ReadWrite], scale),
            Kernel::foreign(&device, "fill", &[Access::Write], fill),
            Kernel::foreign(&device, "copy", &[Access::Read, Access::Write], copy),
            Kernel::foreign(&device, "update", &[Access::Write], update),
        ]
    };
    let [scale, fill, copy, update] =
        kernels.map(|k| CoreKernel::<Vulkan>::new(k.expect("a foreign operation")));
    let stream = client.create_stream().expect("a stream");
    let zeros = vec![0.0f32; N];
    let [x, y, z, w] = [0; 4].map(|_| client.create_f32(stream, &zeros).expect("a buffer"));
    let (graph, ()) = client
        .capture(stream, |_| {
            client.foreign(stream, &update, &[&x])?;
            client.foreign(stream, &scale, &[&x])?;
            client.foreign(stream, &copy, &[&x, &y])?;
            client.foreign(stream, &fill, &[&z])?;
            client.run_builtin(stream, Builtin::Add, &[&y, &z], N as u32, 0.0)?;
            client.run_builtin(stream, Builtin::Add, &[&w, &y], N as u32, 0.0)
        })
        .expect("the capture");
    for _ in 0..100 {
        graph.replay().expect("a replay");
    }
    let step: Vec<f32> = ramp.iter().map(|v| v * 2.0 + 1.0 + 7.0).collect();
    assert_eq!(client.read_f32(&y).expect("y"), step);
    assert_eq!(client.read_f32(&z).expect("z"), vec![7.0; N]);
    // The warmup and a hundred replays each added one step.
    let total: Vec<f32> = step.iter().map(|v| v * 101.0).collect();
    assert_eq!(client.read_f32(&w).expect("w"), total);
    drop(graph);
    client.sync(stream).expect("a sync");
    let counts = validation_counts(&device);
    assert_eq!(counts.errors, 0, "validation errors: {counts:?}");
    if std::env::var(backend_vulkan::SYNC_VALIDATION_ENV).is_ok_and(|v| v == "1") {
        assert!(
            counts.sync,
            "synchronization validation was asked for: {counts:?}"
        );
    }
    drop((scale, fill, copy, update, client));
    assert_eq!(
        Arc::strong_count(&callers),
        1,
        "the kernels let the caller's objects go"
    );
}
