//! The raw driver's side of the eager comparison: the `add` launch built by
//! hand and issued with [`Driver::launch`] on the fixture's own memory.

use graph_capture::{
    Access, Binding, Buffer, Builtin, BuiltinInfo, DeviceSlice, Driver, DriverError, Kernel,
    Launch, groups_for,
};

use crate::backends::Backend;
use crate::failure::Result;
use crate::fixture::Fixture;
use crate::sizes::ELEMENTS;

/// The `add` kernel the core launches, and a buffer holding the launch's
/// info bytes.
pub struct RawAdd<D: Backend> {
    /// The builtin the core's `run_builtin` launches, built the same way.
    pub kernel: Kernel<D>,
    /// `BuiltinInfo::new(ELEMENTS, 0.0)`, on the fixture's stream.
    pub info: Buffer,
}

impl<D: Backend> RawAdd<D> {
    /// Compile the kernel and upload the info bytes on `fixture`'s stream.
    pub fn new(fixture: &Fixture<D>) -> Result<Self> {
        let kernel = Kernel::new(D::builtin(fixture.client.device(), Builtin::Add)?);
        let info = fixture
            .client
            .create(fixture.stream, &BuiltinInfo::new(ELEMENTS, 0.0).to_bytes())?;
        fixture.client.sync(fixture.stream)?;
        Ok(Self { kernel, info })
    }

    /// The bindings of `add` over `slices` (`x`, `y`, info, in the order
    /// [`Client::with_raw_stream`](graph_capture::Client::with_raw_stream)
    /// was given them): `x` read-write, `y` read.
    pub fn bindings<'a>(slices: &[DeviceSlice<'a, D>]) -> [Binding<'a, D>; 2] {
        [
            Binding {
                slice: slices[0],
                access: Access::ReadWrite,
            },
            Binding {
                slice: slices[1],
                access: Access::Read,
            },
        ]
    }

    /// The launch of this kernel with `bindings` and `info`.
    pub fn launch<'a>(
        &'a self,
        bindings: &'a [Binding<'a, D>],
        info: DeviceSlice<'a, D>,
    ) -> Launch<'a, D> {
        Launch {
            kernel: self.kernel.raw(),
            groups: groups_for(ELEMENTS),
            bindings,
            info: Some(info),
            params: &[],
        }
    }
}

/// Wait, on the raw stream, for everything enqueued on it.
pub fn raw_sync<D: Driver>(stream: &mut D::Stream) -> std::result::Result<(), DriverError> {
    let signal = D::signal(stream)?;
    D::fence(stream, signal)
}
