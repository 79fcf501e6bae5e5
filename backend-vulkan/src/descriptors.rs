//! Descriptor pools for one command buffer's launches: grown on demand,
//! reset as a whole once the commands that used their sets completed.

use ash::vk;
use capture_core::{DriverError, MAX_BINDINGS};

use crate::error::{error, vk_error};

/// Descriptor sets each pool holds; a launch takes one set.
pub(crate) const SETS_PER_POOL: u32 = 64;
/// Storage-buffer descriptors each pool holds: enough for every set to
/// bind the most a kernel may (its buffers and its info), so a pool always
/// holds its full count of sets; a pool that runs short is followed by
/// another.
const DESCRIPTORS_PER_POOL: u32 = SETS_PER_POOL * (MAX_BINDINGS as u32 + 1);

/// Descriptor pools that grow on demand and reset as a whole once the
/// commands that used their sets have completed.
#[derive(Debug, Default)]
pub(crate) struct DescriptorPools {
    pools: Vec<vk::DescriptorPool>,
    current: usize,
}

impl DescriptorPools {
    /// Pools with room for `pools` handles reserved.
    pub(crate) fn with_capacity(pools: usize) -> Self {
        Self {
            pools: Vec::with_capacity(pools),
            current: 0,
        }
    }

    fn create_pool(device: &ash::Device) -> Result<vk::DescriptorPool, DriverError> {
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(DESCRIPTORS_PER_POOL)];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_POOL)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info whose pointers outlive the call.
        unsafe { device.create_descriptor_pool(&info, None) }
            .map_err(|e| vk_error("allocate descriptor set", e))
    }

    /// One set of `layout`.
    pub(crate) fn allocate(
        &mut self,
        device: &ash::Device,
        layout: vk::DescriptorSetLayout,
    ) -> Result<vk::DescriptorSet, DriverError> {
        let layouts = [layout];
        loop {
            let fresh = self.current >= self.pools.len();
            if fresh {
                let pool = Self::create_pool(device)?;
                self.pools.push(pool);
                self.current = self.pools.len() - 1;
            }
            let Some(&pool) = self.pools.get(self.current) else {
                return Err(error("allocate descriptor set", "no descriptor pool"));
            };
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pool)
                .set_layouts(&layouts);
            let mut set = vk::DescriptorSet::null();
            // SAFETY: `pool` and `layout` are live objects of this device; a
            // pool is only used by the recorder that owns it; `info` asks for
            // one set and `set` has room for one.
            let result = unsafe {
                (device.fp_v1_0().allocate_descriptor_sets)(device.handle(), &info, &mut set)
            };
            match result {
                vk::Result::SUCCESS => return Ok(set),
                vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL
                    if !fresh =>
                {
                    self.current += 1;
                }
                e => return Err(vk_error("allocate descriptor set", e)),
            }
        }
    }

    /// Frees every set; the commands that used them have completed.
    pub(crate) fn reset(&mut self, device: &ash::Device) {
        for &pool in &self.pools {
            // SAFETY: no pending command buffer uses a set of this pool
            // (the caller waited for its timeline value).
            let reset = unsafe {
                device.reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty())
            };
            if let Err(e) = reset {
                log::warn!("vulkan: resetting a descriptor pool failed: {e:?}");
            }
        }
        self.current = 0;
    }

    /// Destroys every pool; the commands that used them have completed.
    pub(crate) fn destroy(&mut self, device: &ash::Device) {
        for pool in self.pools.drain(..) {
            // SAFETY: as for `reset`; each pool is destroyed once.
            unsafe { device.destroy_descriptor_pool(pool, None) };
        }
        self.current = 0;
    }
}
