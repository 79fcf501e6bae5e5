//! A device, a buffer and a pipeline the caller made with `ash`, handed to a
//! client, as a runtime that already owns its Vulkan objects would: the
//! test makes its own instance (with synchronization validation when the
//! layer is installed), device, buffer, command buffer and pipeline, and
//! destroys them itself at the end.
//!
//! Skips, saying why, when this machine has no Vulkan device. Under
//! `CAPTURE_VULKAN_SYNC_VALIDATION=1` (as CI runs it) the validation layer
//! is required.

use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

mod common;

use ash::vk;
use backend_vulkan::{
    Device, DevicePage, Kernel, RawDevice, SYNC_VALIDATION_ENV, Vulkan, validation_counts,
};
use capture_core::{Builtin, Client, Config, Error, Params, Rejected, Signature};
use common::{scale_pipeline, scale_signature};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The error one test provokes on purpose: a buffer of size 0.
const PROVOKED: &str = "VUID-VkBufferCreateInfo-size-00912";

/// Validation errors reported on the test's own instance, and warnings.
static ERRORS: AtomicU64 = AtomicU64::new(0);
static WARNINGS: AtomicU64 = AtomicU64::new(0);

unsafe extern "system" fn count(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback data pointer, or null.
    let message = unsafe { data.as_ref() }
        .and_then(|data| {
            // SAFETY: the layer's message is a NUL-terminated string.
            unsafe { data.message_as_c_str() }
        })
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    if message.contains(PROVOKED) {
        // The error one test makes on purpose, through the library's view.
        return vk::FALSE;
    }
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        ERRORS.fetch_add(1, Ordering::SeqCst);
        eprintln!("validation error: {message}");
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        WARNINGS.fetch_add(1, Ordering::SeqCst);
        eprintln!("validation warning: {message}");
    }
    vk::FALSE
}

/// Everything the caller made, destroyed by the caller in `Drop`.
struct Own {
    entry: ash::Entry,
    instance: ash::Instance,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    family: u32,
    queue: vk::Queue,
    memory_props: vk::PhysicalDeviceMemoryProperties,
    alignment: u64,
    validated: bool,
    /// Whether the device was made with `VK_EXT_conditional_rendering`.
    conditional_rendering: bool,
}

impl Own {
    /// The caller's instance and device, or why there is none.
    fn new() -> Result<Own, String> {
        // SAFETY: loading the system's Vulkan loader.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no loader: {e}"))?;
        // SAFETY: enumeration has no preconditions.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
        let validated = layers
            .iter()
            .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
        let required = std::env::var(SYNC_VALIDATION_ENV).is_ok_and(|v| v == "1");
        assert!(
            validated || !required,
            "{SYNC_VALIDATION_ENV}=1 but the validation layer is not installed"
        );
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let layer_names = [VALIDATION_LAYER.as_ptr()];
        let ext_names = [
            ash::ext::debug_utils::NAME.as_ptr(),
            ash::ext::validation_features::NAME.as_ptr(),
        ];
        let sync = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&sync);
        let mut info = vk::InstanceCreateInfo::default().application_info(&app);
        if validated {
            info = info
                .enabled_layer_names(&layer_names)
                .enabled_extension_names(&ext_names)
                .push_next(&mut features);
        }
        // SAFETY: every pointer in `info` refers to locals alive for the call.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| format!("no instance: {e:?}"))?;
        let messenger = validated.then(|| {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                        | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(count));
            // SAFETY: the instance enabled VK_EXT_debug_utils.
            let messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }
                .expect("a debug messenger");
            (utils, messenger)
        });
        // SAFETY: a live instance.
        let physicals = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default();
        let found = physicals.iter().find_map(|&physical| {
            // SAFETY: `physical` is one of the instance's.
            let props = unsafe { instance.get_physical_device_properties(physical) };
            if props.api_version < vk::API_VERSION_1_2 {
                return None;
            }
            // SAFETY: as above.
            let families =
                unsafe { instance.get_physical_device_queue_family_properties(physical) };
            let family = families
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))?;
            Some((physical, u32::try_from(family).ok()?, props))
        });
        let Some((physical, family, props)) = found else {
            // SAFETY: nothing else was made from the instance but the messenger.
            unsafe {
                if let Some((utils, messenger)) = &messenger {
                    utils.destroy_debug_utils_messenger(*messenger, None);
                }
                instance.destroy_instance(None);
            }
            return Err("no Vulkan 1.2 device with a compute queue".into());
        };
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        // Conditional rendering where the device offers it, as a runtime
        // that wants loops in its graphs enables it.
        // SAFETY: a device of the instance.
        let extensions =
            unsafe { instance.enumerate_device_extension_properties(physical) }.unwrap_or_default();
        let conditional_rendering = extensions.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|name| name == ash::ext::conditional_rendering::NAME)
        });
        let names = [ash::ext::conditional_rendering::NAME.as_ptr()];
        let mut rendering = vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default()
            .conditional_rendering(true);
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut v12);
        if conditional_rendering {
            info = info
                .enabled_extension_names(&names)
                .push_next(&mut rendering);
        }
        // SAFETY: a device of the instance, a family it has, 1.2 features,
        // conditional rendering only where the device offers it.
        let device =
            unsafe { instance.create_device(physical, &info, None) }.expect("the caller's device");
        // SAFETY: one queue of `family` was asked for.
        let queue = unsafe { device.get_device_queue(family, 0) };
        // SAFETY: as above.
        let memory_props = unsafe { instance.get_physical_device_memory_properties(physical) };
        Ok(Own {
            entry,
            instance,
            messenger,
            physical,
            device,
            family,
            queue,
            memory_props,
            alignment: props.limits.min_storage_buffer_offset_alignment.max(1),
            validated,
            conditional_rendering,
        })
    }

    /// The handles, for `Device::from_raw`.
    fn raw(&self) -> RawDevice {
        RawDevice {
            entry: self.entry.clone(),
            instance: self.instance.clone(),
            physical: self.physical,
            device: self.device.clone(),
            queue_family: self.family,
            queue: self.queue,
            conditional_rendering: self.conditional_rendering,
            validation: self.validated,
        }
    }

    /// A host-visible storage buffer of `size` bytes, its memory and mapping.
    fn buffer(&self, size: u64) -> (vk::Buffer, vk::DeviceMemory, *mut f32) {
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info.
        let buffer = unsafe { self.device.create_buffer(&info, None) }.expect("a buffer");
        // SAFETY: a live buffer of the device.
        let needs = unsafe { self.device.get_buffer_memory_requirements(buffer) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let index = (0..self.memory_props.memory_type_count)
            .find(|&i| {
                needs.memory_type_bits & (1 << i) != 0
                    && self.memory_props.memory_types[i as usize]
                        .property_flags
                        .contains(wanted)
            })
            .expect("host-visible memory");
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(index);
        // SAFETY: a memory type of this device.
        let memory = unsafe { self.device.allocate_memory(&alloc, None) }.expect("memory");
        // SAFETY: neither is bound yet; the memory meets the requirements.
        unsafe { self.device.bind_buffer_memory(buffer, memory, 0) }.expect("bind");
        // SAFETY: host-visible memory, not mapped yet.
        let mapped = unsafe {
            self.device
                .map_memory(memory, 0, size, vk::MemoryMapFlags::empty())
        }
        .expect("map");
        (buffer, memory, mapped.cast())
    }

    /// The caller's compute pipeline of SCALE, with its layouts.
    fn pipeline(&self) -> (vk::Pipeline, vk::PipelineLayout, vk::DescriptorSetLayout) {
        scale_pipeline(&self.device)
    }

    /// Fills `len` bytes of `buffer` at `offset` with `value` by a command
    /// buffer of the caller's own, submitted and waited for: through the
    /// adopted device's queue lock when `adopted` is given, as its
    /// `# Safety` asks once a client may submit.
    fn fill(
        &self,
        buffer: vk::Buffer,
        offset: u64,
        len: u64,
        value: f32,
        adopted: Option<&Device>,
    ) {
        let device = &self.device;
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(self.family);
        // SAFETY: a family of the device.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }.expect("pool");
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .command_buffer_count(1);
        // SAFETY: a live pool.
        let cmd = unsafe { device.allocate_command_buffers(&alloc) }.expect("cmd")[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::HOST_READ
                    | vk::AccessFlags::MEMORY_READ
                    | vk::AccessFlags::MEMORY_WRITE,
            );
        // SAFETY: a fresh command buffer, recorded and submitted once; the
        // range lies in the buffer.
        unsafe {
            device.begin_command_buffer(cmd, &begin).expect("begin");
            device.cmd_fill_buffer(cmd, buffer, offset, len, value.to_bits());
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::ALL_COMMANDS,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
            device.end_command_buffer(cmd).expect("end");
        }
        // SAFETY: a valid create info.
        let fence =
            unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.expect("fence");
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        let submit_on = |queue: vk::Queue| {
            // SAFETY: the queue is externally synchronized (the caller's
            // alone before a client, else under the device's queue lock);
            // the command buffer is executable.
            unsafe { device.queue_submit(queue, &[submit], fence) }.expect("submit");
        };
        match adopted {
            Some(adopted) => adopted.with_queue(submit_on),
            None => submit_on(self.queue),
        }
        // SAFETY: the fence was submitted; nothing uses the pool afterwards.
        unsafe {
            device
                .wait_for_fences(&[fence], true, u64::MAX)
                .expect("wait");
            device.destroy_fence(fence, None);
            device.destroy_command_pool(pool, None);
        }
    }
}

impl Own {
    /// Destroy the device and instance, then check that validation, where
    /// it ran, reported no error.
    fn finish(self) {
        let validated = self.validated;
        drop(self);
        if validated {
            assert_eq!(
                ERRORS.load(Ordering::SeqCst),
                0,
                "validation errors (see stderr)"
            );
        } else {
            eprintln!("the validation layer is not installed: ran without it");
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        // SAFETY: the library let go of everything (its keep-alives were
        // dropped), and nothing the test made is in use.
        unsafe {
            self.device.device_wait_idle().expect("idle");
            self.device.destroy_device(None);
            if let Some((utils, messenger)) = self.messenger.take() {
                utils.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

#[test]
fn a_callers_device_buffer_and_pipeline_capture_and_replay() {
    let own = match Own::new() {
        Ok(own) => own,
        Err(reason) => {
            eprintln!("skipping: {reason}");
            return;
        }
    };
    const N: usize = 1000;
    let len = (N * 4) as u64;
    // The caller's buffer holds its own data before and after the range it
    // hands over; the range starts at an aligned offset inside it.
    let offset = own.alignment.max(256);
    let size = offset + len + 256;
    let (buffer, memory, mapped) = own.buffer(size);
    own.fill(buffer, 0, size, 7.0, None);
    own.fill(buffer, offset, len, 1.0, None);
    let (pipeline, layout, set_layout) = own.pipeline();

    let kept = Arc::new(());
    {
        // SAFETY: the handles are live and belong together, the device
        // enabled timeline semaphores, and the test submits to the queue no
        // more while the client lives; all stay live until the keep-alive
        // is dropped.
        let device = unsafe { Device::from_raw(own.raw(), kept.clone()) }.expect("adopted");
        let client = Client::<Vulkan>::with_device(device.clone(), Config::default());
        let stream = client.create_stream().expect("stream");
        // SAFETY: the buffer is the device's, made with storage and
        // transfer usage, exclusive, and `offset + len` lies inside it; the
        // test touches it again only after syncing.
        let page = unsafe { DevicePage::from_raw(&device, buffer, offset, len, kept.clone()) }
            .expect("a page");
        let x = client
            .import(stream, page)
            .map_err(|rejected| rejected.error)
            .expect("imported");
        // SAFETY: SCALE follows the binding convention with `layout` and
        // `set_layout`, and touches `x[i]` only for `i < n`, which the
        // launch below keeps within `x`.
        let scale = unsafe {
            Kernel::from_raw(
                &device,
                pipeline,
                layout,
                set_layout,
                scale_signature(),
                kept.clone(),
            )
        }
        .expect("the caller's kernel");
        let scale = capture_core::Kernel::new(scale);
        let one = client.create_f32(stream, &[1.0; N]).expect("one");
        let groups = [(N as u32).div_ceil(64), 1, 1];
        let params = Params::new().u32(N as u32).f32(1.0).f32(1.0);
        let (graph, ()) = client
            .capture(stream, |_| {
                client.launch(stream, &scale, groups, &[&x], &[], params.as_bytes())?;
                client.run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)
            })
            .expect("a capture over the caller's buffer and pipeline");
        // The caller keeps submitting work of its own to the queue from
        // another thread, through the device's queue lock, while the client
        // replays: the validation layer's thread checks see every
        // submission externally synchronized.
        let (scratch, scratch_memory, _) = own.buffer(4096);
        std::thread::scope(|scope| {
            let own = &own;
            let device = &device;
            scope.spawn(move || {
                for round in 0..50 {
                    own.fill(scratch, 0, 4096, round as f32, Some(device));
                }
            });
            for _ in 0..100 {
                graph.replay().expect("replay");
            }
        });
        client.sync(stream).expect("sync");
        // SAFETY: the caller's own submissions on it were waited for.
        unsafe {
            own.device.destroy_buffer(scratch, None);
            own.device.free_memory(scratch_memory, None);
        }
        // Each run adds 2: the capture's warmup and 100 replays.
        assert_eq!(client.read_f32(&x).expect("read"), vec![203.0; N]);
        drop((graph, scale, x, one));
        client.destroy_stream(stream).expect("destroy");
        assert!(
            Arc::strong_count(&kept) > 1,
            "the client still holds the device"
        );
    }
    assert_eq!(Arc::strong_count(&kept), 1, "every keep-alive dropped");

    // SAFETY: the mapping covers `size` bytes, and the device is past every
    // use of the buffer (the stream was synced and destroyed).
    let values = unsafe { std::slice::from_raw_parts(mapped, (size / 4) as usize) };
    let (before, rest) = values.split_at((offset / 4) as usize);
    let (range, after) = rest.split_at(N);
    assert!(before.iter().all(|&v| v == 7.0), "nothing before the range");
    assert_eq!(range, &[203.0; N][..], "read through the caller's mapping");
    assert!(after.iter().all(|&v| v == 7.0), "nothing after the range");

    // The caller destroys what it made; the library destroyed none of it,
    // or validation would report the handles as already destroyed.
    // SAFETY: nothing uses them any more.
    unsafe {
        own.device.destroy_pipeline(pipeline, None);
        own.device.destroy_pipeline_layout(layout, None);
        own.device.destroy_descriptor_set_layout(set_layout, None);
        own.device.destroy_buffer(buffer, None);
        own.device.free_memory(memory, None);
    }
    own.finish();
}

#[test]
fn loops_record_on_an_adopted_device_only_where_it_enabled_conditional_rendering() {
    let own = match Own::new() {
        Ok(own) => own,
        Err(reason) => {
            eprintln!("skipping: {reason}");
            return;
        }
    };
    const N: u32 = 64;
    // Once with what the device enabled, once claiming none.
    for claimed in [own.conditional_rendering, false] {
        let raw = RawDevice {
            conditional_rendering: claimed,
            ..own.raw()
        };
        // SAFETY: the handles are live and belong together, and the device
        // enabled conditional rendering wherever `claimed` says so.
        let device = unsafe { Device::from_raw(raw, ()) }.expect("adopted");
        let client = Client::<Vulkan>::with_device(device, Config::default());
        let stream = client.create_stream().expect("stream");
        let x = client.create_f32(stream, &[0.0; N as usize]).expect("x");
        let one = client.create_f32(stream, &[1.0; N as usize]).expect("one");
        let flag = client.create(stream, &[0; 4]).expect("flag");
        // A loop whose body clears its flag: one iteration a replay.
        let captured = client.capture(stream, |_| {
            client.run_builtin(stream, Builtin::Fill, &[&flag], 1, 1.0)?;
            client.while_flag(stream, &flag, 4, || {
                client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)?;
                client.run_builtin(stream, Builtin::Fill, &[&flag], 1, 0.0)
            })
        });
        match captured {
            Ok((graph, _)) => {
                assert!(
                    claimed,
                    "recorded on a device that claimed no conditional rendering"
                );
                client.write_f32(&x, &[0.0; N as usize]).expect("reset");
                for _ in 0..10 {
                    graph.replay().expect("replay");
                }
                assert_eq!(client.read_f32(&x).expect("x"), vec![10.0; N as usize]);
            }
            Err(err) => {
                assert!(!claimed, "refused although enabled: {err}");
                assert!(
                    err.to_string().contains("RawDevice::conditional_rendering"),
                    "{err}"
                );
            }
        }
        client.destroy_stream(stream).expect("destroy");
    }
    own.finish();
}

/// A keep-alive whose count shows whether a refusal dropped it.
fn handed_back<T: std::fmt::Debug>(
    kept: &Arc<()>,
    refused: Result<T, Rejected<Arc<()>>>,
) -> String {
    let (err, back) = refused.expect_err("refused").into_parts();
    assert!(Arc::ptr_eq(&back, kept), "the caller's own keep-alive");
    assert_eq!(
        Arc::strong_count(kept),
        2,
        "handed back untouched, not dropped: {err}"
    );
    drop(back);
    err.to_string()
}

#[test]
fn bad_handles_are_refused_and_hand_the_keep_alive_back() {
    let own = match Own::new() {
        Ok(own) => own,
        Err(reason) => {
            eprintln!("skipping: {reason}");
            return;
        }
    };
    let kept = Arc::new(());
    let adopt = |raw: RawDevice| {
        // SAFETY: the handles belong together but for what each call gets
        // wrong, which the adoption refuses before using anything.
        handed_back(&kept, unsafe { Device::from_raw(raw, kept.clone()) })
    };
    let mut raw = own.raw();
    raw.queue_family = 99;
    assert!(adopt(raw).contains("queue family 99"));
    let mut raw = own.raw();
    raw.queue = vk::Queue::null();
    assert!(adopt(raw).contains("null"));
    let mut raw = own.raw();
    raw.physical = vk::PhysicalDevice::null();
    assert!(adopt(raw).contains("not one of the instance's"));
    if !own.conditional_rendering {
        let mut raw = own.raw();
        raw.conditional_rendering = true;
        assert!(adopt(raw).contains("conditional_rendering"));
    }

    // SAFETY: the handles are live and belong together.
    let device = unsafe { Device::from_raw(own.raw(), ()) }.expect("adopted");
    let (buffer, memory, _) = own.buffer(4096);
    let refused = |offset: u64, len: u64, handle: vk::Buffer| {
        // SAFETY: `buffer` is a live buffer of the device with the usages
        // asked for; each call is refused before any use.
        let page = unsafe { DevicePage::from_raw(&device, handle, offset, len, kept.clone()) };
        handed_back(&kept, page)
    };
    assert!(refused(0, 16, vk::Buffer::null()).contains("null"));
    assert!(refused(0, 0, buffer).contains("empty"));
    assert!(refused(1, 16, buffer).contains("multiple of"));
    assert!(refused(0, 8192, buffer).contains("past the buffer"));
    assert!(refused(4096, 256, buffer).contains("past the buffer"));
    // An aligned offset whose end overflows.
    let far = u64::MAX - u64::MAX % own.alignment;
    assert!(refused(far, 256, buffer).contains("past the buffer"));

    // A page of another device is refused by the client, handed back whole.
    // SAFETY: the handles are live and belong together; `other` makes no
    // stream, so it never submits to the queue `device` submits to.
    let other = unsafe { Device::from_raw(own.raw(), ()) }.expect("adopted again");
    let client = Client::<Vulkan>::with_device(device.clone(), Config::default());
    let stream = client.create_stream().expect("stream");
    // SAFETY: as above; the range lies inside the buffer.
    let page =
        unsafe { DevicePage::from_raw(&other, buffer, 0, 256, kept.clone()) }.expect("a page");
    let (err, page) = client
        .import(stream, page)
        .expect_err("another device's page")
        .into_parts();
    assert!(
        matches!(err, Error::OtherDevice { what: "page", .. }),
        "{err}"
    );
    assert_eq!(Arc::strong_count(&kept), 2, "the page holds the keep-alive");
    drop(page);
    assert_eq!(Arc::strong_count(&kept), 1);

    let (pipeline, layout, set_layout) = own.pipeline();
    let kernel = |pipeline: vk::Pipeline, signature: Signature| {
        // SAFETY: the pipeline, when not null, runs SCALE with these
        // layouts; each call is refused before any use.
        let made = unsafe {
            Kernel::from_raw(
                &device,
                pipeline,
                layout,
                set_layout,
                signature,
                kept.clone(),
            )
        };
        handed_back(&kept, made)
    };
    assert!(kernel(vk::Pipeline::null(), scale_signature()).contains("null"));
    let too_wide = scale_signature().workgroup([u32::MAX, 1, 1]);
    assert!(kernel(pipeline, too_wide).contains("workgroup of"));
    // A `?` reaches the core's error from the refusal.
    let question = || -> Result<Kernel, Error> {
        // SAFETY: as above.
        Ok(unsafe {
            Kernel::from_raw(
                &device,
                vk::Pipeline::null(),
                layout,
                set_layout,
                scale_signature(),
                (),
            )
        }?)
    };
    assert!(matches!(question(), Err(Error::Compile { .. })));
    assert_eq!(Arc::strong_count(&kept), 1, "nothing kept a clone");
    drop((client, device, other));
    // SAFETY: nothing uses them: every call above was refused, and the
    // client that imported nothing of the buffer is gone.
    unsafe {
        own.device.destroy_pipeline(pipeline, None);
        own.device.destroy_pipeline_layout(layout, None);
        own.device.destroy_descriptor_set_layout(set_layout, None);
        own.device.destroy_buffer(buffer, None);
        own.device.free_memory(memory, None);
    }
    own.finish();
}

#[test]
fn the_library_counts_validation_on_an_adopted_device_where_the_instance_validates() {
    let own = match Own::new() {
        Ok(own) => own,
        Err(reason) => {
            eprintln!("skipping: {reason}");
            return;
        }
    };
    let kept = Arc::new(());
    // SAFETY: the handles are live and belong together, and the instance
    // enabled the layer and VK_EXT_debug_utils wherever `validated` says so.
    let device = unsafe { Device::from_raw(own.raw(), kept.clone()) }.expect("adopted");
    let counts = validation_counts(&device);
    assert_eq!(counts.enabled, own.validated, "{counts:?}");
    assert_eq!(counts.errors, 0, "{counts:?}");
    // Work through a client, counted clean.
    let client = Client::<Vulkan>::with_device(device.clone(), Config::default());
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[1.0; 64]).expect("x");
    let one = client.create_f32(stream, &[1.0; 64]).expect("one");
    client
        .run_builtin(stream, Builtin::Add, &[&x, &one], 64, 0.0)
        .expect("add");
    assert_eq!(client.read_f32(&x).expect("read"), vec![2.0; 64]);
    drop((x, one));
    client.destroy_stream(stream).expect("destroy");
    drop(client);
    assert_eq!(validation_counts(&device).errors, 0);
    if own.validated {
        // A misuse through the library's own view of the device reaches its
        // counts: the layer reports a buffer of size 0 and skips the call.
        let info = vk::BufferCreateInfo::default()
            .size(0)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
        // SAFETY: the layer refuses the invalid create info before the
        // driver sees it; a buffer made anyway is destroyed at once.
        unsafe {
            if let Ok(buffer) = device.raw().create_buffer(&info, None) {
                device.raw().destroy_buffer(buffer, None);
            }
        }
        let counts = validation_counts(&device);
        assert!(counts.errors >= 1, "the error was not counted: {counts:?}");
    }
    drop(device);
    assert_eq!(Arc::strong_count(&kept), 1, "the keep-alive dropped");
    // The library's messenger is gone with the device: the instance is
    // destroyed below with only the test's own, which validation would
    // report otherwise.
    own.finish();
}
