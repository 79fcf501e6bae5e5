//! The builtin kernels: PTX text shipped in the crate and compiled by the
//! driver's JIT for whatever GPU it finds, once per device.

use std::ffi::{CString, c_uint, c_void};
use std::sync::{Arc, MutexGuard, PoisonError};

use capture_core::{Builtin, DriverError};
use cudarc::driver::sys::{self, CUfunction, CUmodule};

use crate::device::CudaDevice;
use crate::error::{check, describe, refuse};

/// The kernels' body; the header naming the PTX version and target is
/// chosen per device by [`ptx_for`].
const PTX_BODY: &str = include_str!("kernels.ptx");

/// The PTX for a device of compute capability `major.minor`,
/// NUL-terminated as `cuModuleLoadDataEx` reads it.
///
/// From Turing (7.5) on, the target is `sm_75`: recent drivers dropped
/// compiling for the older targets, while every driver this backend accepts
/// (11.4 and newer, PTX ISA 7.4) knows `sm_75`. Older GPUs get `sm_52`, the
/// oldest target the kernels' instructions allow.
pub(crate) fn ptx_for(major: i32, minor: i32) -> String {
    let (version, target) = if (major, minor) >= (7, 5) {
        ("7.4", "sm_75")
    } else {
        ("7.0", "sm_52")
    };
    format!(".version {version}\n.target {target}\n.address_size 64\n\n{PTX_BODY}\0")
}

/// Bytes kept of the JIT's error log, enough for any message about a module
/// this small.
const LOG_BYTES: usize = 4096;

/// A builtin kernel, compiled for one device.
///
/// Holds its device, which holds the module the function lives in, so the
/// function cannot outlive its code.
pub struct CudaKernel {
    pub(crate) function: CUfunction,
    pub(crate) device: Arc<CudaDevice>,
    which: Builtin,
}

// SAFETY: a CUfunction is an immutable, process-wide handle any thread may
// launch once its context is current, which every launch ensures.
unsafe impl Send for CudaKernel {}
// SAFETY: as for Send; nothing mutates the handle.
unsafe impl Sync for CudaKernel {}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaKernel({})", self.which.name())
    }
}

/// The loaded PTX module and its four functions, in [`Builtin::ALL`] order.
pub(crate) struct Module {
    raw: CUmodule,
    functions: [CUfunction; 4],
}

impl Module {
    /// Compile the PTX for a device of compute capability `major.minor`.
    /// The caller has made the device's context current.
    fn load((major, minor): (i32, i32)) -> Result<Self, DriverError> {
        let ptx = ptx_for(major, minor);
        const OP: &str = "compile builtin kernels";
        let mut log = vec![0u8; LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The JIT takes each option's value in a pointer-sized slot; a size
        // is passed as the integer itself, not as a pointer to it.
        let mut values: [*mut c_void; 2] = [
            log.as_mut_ptr().cast::<c_void>(),
            std::ptr::without_provenance_mut(LOG_BYTES),
        ];
        let mut raw: CUmodule = std::ptr::null_mut();
        // SAFETY: the image is NUL-terminated PTX text that outlives the call;
        // `options` and `values` hold the same number of entries, which is
        // passed; the log buffer holds the LOG_BYTES the option announces.
        let loaded = unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                ptx.as_ptr().cast::<c_void>(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if let Err(e) = check(OP, loaded) {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let jit = String::from_utf8_lossy(&log[..end]);
            let jit = jit.trim();
            return Err(if jit.is_empty() {
                e
            } else {
                refuse(OP, format!("{}; the JIT said: {jit}", describe(loaded)))
            });
        }
        let mut module = Self {
            raw,
            functions: [std::ptr::null_mut(); 4],
        };
        for which in Builtin::ALL {
            let slot = &mut module.functions[which.index()];
            let name = CString::new(entry_name(which))
                .map_err(|_| refuse(OP, "a kernel name holds a NUL byte"))?;
            // SAFETY: the module is live, the name NUL-terminated, and `slot`
            // a valid place for the handle.
            let found = unsafe { sys::cuModuleGetFunction(slot, module.raw, name.as_ptr()) };
            if let Err(e) = check(OP, found) {
                module.unload();
                return Err(e);
            }
        }
        Ok(module)
    }

    /// Unload the module. The caller has made its context current and holds
    /// no function of it any more.
    pub(crate) fn unload(self) {
        // SAFETY: the module is owned here and unloaded once.
        let unloaded = unsafe { sys::cuModuleUnload(self.raw) };
        if let Err(e) = check("unload builtin kernels", unloaded) {
            log::warn!("{e}");
        }
    }
}

/// The PTX entry point of `which`: its name behind a prefix, since `add` is a
/// reserved word of PTX.
pub(crate) fn entry_name(which: Builtin) -> String {
    format!("builtin_{}", which.name())
}

/// `which`, compiled for `device`; the module is compiled on the first call
/// and kept by the device, so later calls cost a lock and a lookup.
pub(crate) fn builtin(device: &Arc<CudaDevice>, which: Builtin) -> Result<CudaKernel, DriverError> {
    let mut slot: MutexGuard<'_, Option<Module>> = device
        .kernels
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let module = match &mut *slot {
        Some(module) => module,
        empty => {
            device.bind()?;
            empty.insert(Module::load(device.compute_capability())?)
        }
    };
    Ok(CudaKernel {
        function: module.functions[which.index()],
        device: Arc::clone(device),
        which,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PTX as a Turing-or-newer device loads it.
    const PTX: &str = PTX_BODY;

    /// `which`'s entry name, and its text from `.visible .entry` up to the
    /// closing brace.
    fn entry_text(which: Builtin) -> (String, &'static str) {
        let entry = entry_name(which);
        let start = PTX
            .find(&format!(".visible .entry {entry}("))
            .unwrap_or_else(|| panic!("{entry} is missing"));
        let rest = &PTX[start..];
        let body = &rest[..rest.find("\n}\n").expect("body closes")];
        (entry, body)
    }

    /// The PTX cannot be compiled here, so at least its interface is checked:
    /// one entry per builtin, each taking one pointer per binding plus the
    /// info pointer, and every entry in the same shape.
    #[test]
    fn every_builtin_has_an_entry_with_its_bindings() {
        for which in Builtin::ALL {
            let (entry, body) = entry_text(which);
            let params = &body[..body.find(')').expect("parameter list closes")];
            let count = params.matches(".param .u64").count();
            assert_eq!(count, which.accesses().len() + 1, "{entry} parameters");
            for needle in [
                "%ctaid.y",
                "%nctaid.x",
                "%ctaid.x",
                "%tid.x",
                "mul.wide.u32",
                "setp.ge.u64",
                "ret;",
            ] {
                assert!(body.contains(needle), "{entry} lacks {needle}");
            }
            assert_eq!(
                body.matches("st.global.f32").count(),
                1,
                "{entry} stores once"
            );
        }
        assert_eq!(PTX.matches(".visible .entry").count(), Builtin::ALL.len());
        assert!(ptx_for(9, 0).starts_with(".version 7.4\n.target sm_75\n.address_size 64\n"));
        assert!(ptx_for(7, 5).contains(".target sm_75\n"));
        assert!(ptx_for(7, 0).starts_with(".version 7.0\n.target sm_52\n.address_size 64\n"));
        assert!(!PTX.contains("\n.version") && !PTX.contains("\n.target"));
    }

    /// Each entry loads exactly the parameters it declares, each once, and
    /// uses only registers its declarations cover; ptxas would reject the
    /// rest, but only on a machine with a GPU.
    #[test]
    fn entries_load_their_own_parameters_and_declared_registers() {
        for which in Builtin::ALL {
            let (entry, body) = entry_text(which);
            let (head, code) = body.split_once('{').expect("body opens");
            let declared: Vec<&str> = head
                .split(".param .u64")
                .skip(1)
                .map(|p| p.trim().trim_end_matches([',', ')']).trim())
                .collect();
            let loaded: Vec<&str> = code
                .match_indices("ld.param.u64")
                .map(|(at, _)| {
                    let line = &code[at..code[at..].find(';').map_or(code.len(), |e| at + e)];
                    let open = line.find('[').expect("operand opens");
                    &line[open + 1..line.len() - 1]
                })
                .collect();
            let mut sorted = loaded.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                loaded.len(),
                "{entry} loads a parameter twice"
            );
            for name in &declared {
                assert!(name.starts_with(&format!("{entry}_")), "{entry}: {name}");
                assert!(loaded.contains(name), "{entry} never loads {name}");
            }
            assert_eq!(loaded.len(), declared.len(), "{entry}: {loaded:?}");
            // The info pointer comes last, after one pointer per binding.
            assert_eq!(declared.last(), Some(&format!("{entry}_info").as_str()));
            for (prefix, kind) in [
                ("%rd", ".b64"),
                ("%r", ".b32"),
                ("%f", ".f32"),
                ("%p", ".pred"),
            ] {
                let decl = format!(".reg {kind} \t{prefix}<");
                let at = code
                    .find(&decl)
                    .unwrap_or_else(|| panic!("{entry}: no {decl}"));
                let count: usize = code[at + decl.len()..]
                    .split('>')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{entry}: bad {decl}"));
                for (at, _) in code.match_indices(prefix) {
                    let digits: String = code[at + prefix.len()..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    if let Ok(index) = digits.parse::<usize>() {
                        assert!(index < count, "{entry} uses {prefix}{index} of {count}");
                    }
                }
            }
        }
        assert_eq!(PTX.matches('{').count(), PTX.matches('}').count());
        let full = ptx_for(9, 0);
        assert!(full.ends_with('\0') && !full[..full.len() - 1].contains('\0'));
    }
}
