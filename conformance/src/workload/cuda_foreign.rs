//! The workload's foreign operations on CUDA, as a caller of its own makes
//! them: the driver's copies and memsets, and cuBLAS's SGEMM for the
//! matmul, each loaded at run time (`libcuda.so.1`, already loaded by the
//! backend; cuBLAS from `CAPTURE_CUBLAS_LIBRARY` or the usual names).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use graph_capture::cuda::{CUcontext, CUdeviceptr, CUstream, Device, ForeignStream, Kernel};
use graph_capture::{DriverError, Error};

use super::foreign::{DELIBERATE, FOREIGN_FAILURE, ForeignWork, answered, equal_runs};

type CopyFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> c_int;
type MemsetFn = unsafe extern "C" fn(CUdeviceptr, u32, usize, CUstream) -> c_int;
type PushFn = unsafe extern "C" fn(CUcontext) -> c_int;
type PopFn = unsafe extern "C" fn(*mut CUcontext) -> c_int;

/// The driver calls the operations make.
struct Driver {
    copy: CopyFn,
    memset: MemsetFn,
    push: PushFn,
    pop: PopFn,
    _library: libloading::Library,
}

fn driver() -> Result<&'static Driver, String> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: the driver library the backend loaded; each symbol is
            // looked up with its prototype in cuda.h.
            unsafe {
                let library =
                    libloading::Library::new("libcuda.so.1").map_err(|e| e.to_string())?;
                let get = |name: &[u8]| -> Result<*const c_void, String> {
                    library
                        .get::<*const c_void>(name)
                        .map(|s| *s)
                        .map_err(|e| e.to_string())
                };
                Ok(Driver {
                    copy: std::mem::transmute::<*const c_void, CopyFn>(get(
                        b"cuMemcpyDtoDAsync_v2\0",
                    )?),
                    memset: std::mem::transmute::<*const c_void, MemsetFn>(get(
                        b"cuMemsetD32Async\0",
                    )?),
                    push: std::mem::transmute::<*const c_void, PushFn>(get(
                        b"cuCtxPushCurrent_v2\0",
                    )?),
                    pop: std::mem::transmute::<*const c_void, PopFn>(get(b"cuCtxPopCurrent_v2\0")?),
                    _library: library,
                })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

type CreateFn = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type SetStreamFn = unsafe extern "C" fn(*mut c_void, CUstream) -> c_int;
type SetWorkspaceFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> c_int;
#[allow(clippy::type_complexity)]
type SgemmFn = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> c_int;

/// One cuBLAS handle, on one device, used by one caller at a time.
struct Blas {
    handle: *mut c_void,
    set_stream: SetStreamFn,
    set_workspace: SetWorkspaceFn,
    sgemm: SgemmFn,
    _library: Arc<libloading::Library>,
}

// SAFETY: the handle is used only under the mutex holding it.
unsafe impl Send for Blas {}

/// A cuBLAS handle for `device`'s context.
fn blas(device: &Device) -> Result<Blas, String> {
    let names: Vec<String> = std::env::var("CAPTURE_CUBLAS_LIBRARY")
        .into_iter()
        .chain(["libcublas.so.13", "libcublas.so.12", "libcublas.so"].map(str::to_owned))
        .collect();
    // SAFETY: loading cuBLAS runs its initializers, which touch nothing of
    // ours.
    let library = names
        .iter()
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
        .ok_or_else(|| format!("no cuBLAS library found (tried {})", names.join(", ")))?;
    let library = Arc::new(library);
    let driver = driver()?;
    // SAFETY: each symbol with its prototype in cublas_api.h; the context is
    // the device's, live, pushed for the creation and popped after.
    unsafe {
        let get = |name: &[u8]| -> Result<*const c_void, String> {
            library
                .get::<*const c_void>(name)
                .map(|s| *s)
                .map_err(|e| e.to_string())
        };
        let create = std::mem::transmute::<*const c_void, CreateFn>(get(b"cublasCreate_v2\0")?);
        let set_workspace =
            std::mem::transmute::<*const c_void, SetWorkspaceFn>(get(b"cublasSetWorkspace_v2\0")?);
        let set_stream =
            std::mem::transmute::<*const c_void, SetStreamFn>(get(b"cublasSetStream_v2\0")?);
        let sgemm = std::mem::transmute::<*const c_void, SgemmFn>(get(b"cublasSgemm_v2\0")?);
        answered("cuCtxPushCurrent_v2", (driver.push)(device.raw_context()))?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        let made = answered("cublasCreate_v2", create(&mut handle));
        let mut popped: CUcontext = std::ptr::null_mut();
        (driver.pop)(&mut popped);
        made?;
        Ok(Blas {
            handle,
            set_stream,
            set_workspace,
            sgemm,
            _library: library,
        })
    }
}

/// The cuBLAS handle of `device`'s context, made on first use and kept
/// for the life of the process, as a framework keeps one per device.
fn blas_for(device: &Device) -> Result<Arc<Mutex<Blas>>, String> {
    static HANDLES: Mutex<Vec<(usize, Arc<Mutex<Blas>>)>> = Mutex::new(Vec::new());
    let context = device.raw_context() as usize;
    let mut handles = HANDLES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, blas)) = handles.iter().find(|(c, _)| *c == context) {
        return Ok(Arc::clone(blas));
    }
    let blas = Arc::new(Mutex::new(blas(device)?));
    handles.push((context, Arc::clone(&blas)));
    Ok(blas)
}

/// `y = x wᵀ` (row-major `w` of rows x cols, `x` of batch x cols): in
/// cuBLAS's column-major terms, `yᵀ (rows x batch) = wᵀᵀ xᵀ`.
fn sgemm(
    blas: &Mutex<Blas>,
    stream: &ForeignStream<'_>,
    [rows, cols, batch]: [u32; 3],
) -> Result<(), String> {
    let [w, x, y] = stream.buffers else {
        return Err("foreign_matmul takes w, x and y".into());
    };
    let elements = |len: u64, n: u32, m: u32| len / 4 >= u64::from(n) * u64::from(m);
    if !(elements(w.len, rows, cols)
        && elements(x.len, batch, cols)
        && elements(y.len, batch, rows))
    {
        return Err("foreign_matmul's buffers are too short for its shape".into());
    }
    let blas = blas.lock().unwrap_or_else(PoisonError::into_inner);
    let int = |n: u32| c_int::try_from(n).map_err(|e| e.to_string());
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the handle is live and used under its lock; every range was
    // checked to hold the elements the shape reads or writes; the scalars
    // are host values, read during the call.
    unsafe {
        answered(
            "cublasSetStream_v2",
            (blas.set_stream)(blas.handle, stream.stream),
        )?;
        // No workspace: setting the stream hands cuBLAS its default pool
        // back, which it may allocate from, and one workspace of ours would
        // be shared by graphs replaying at once on different streams.
        answered(
            "cublasSetWorkspace_v2",
            (blas.set_workspace)(blas.handle, std::ptr::null_mut(), 0),
        )?;
        answered(
            "cublasSgemm_v2",
            (blas.sgemm)(
                blas.handle,
                1,
                0,
                int(rows)?,
                int(batch)?,
                int(cols)?,
                &alpha,
                w.address as usize as *const f32,
                int(cols)?,
                x.address as usize as *const f32,
                int(cols)?,
                &beta,
                y.address as usize as *mut f32,
                int(rows)?,
            ),
        )
    }
}

/// `work` as a CUDA foreign operation; `None` for a matmul where cuBLAS is
/// not found (said once on stderr).
pub(super) fn foreign_op(
    device: &Arc<Device>,
    work: &ForeignWork,
) -> Option<Result<Kernel, Error>> {
    let refused = |why: String| Error::Driver(DriverError::new("cuda", "foreign operation", why));
    let driver = match driver() {
        Ok(driver) => driver,
        Err(why) => return Some(Err(refused(why))),
    };
    let blas = match work {
        ForeignWork::MatMul { .. } => match blas_for(device) {
            Ok(blas) => Some(blas),
            Err(why) => {
                static SAID: OnceLock<()> = OnceLock::new();
                SAID.get_or_init(|| eprintln!("cuda: no foreign matmul: {why}"));
                return None;
            }
        },
        _ => None,
    };
    let work = work.clone();
    let (name, accesses) = (work.name(), work.accesses());
    let op = move |s: &ForeignStream<'_>| -> Result<(), String> {
        // SAFETY: every call writes only the declared ranges, within their
        // lengths, on the stream handed over.
        unsafe {
            match (&work, s.buffers) {
                (ForeignWork::Copy, [src, dst]) => answered(
                    "cuMemcpyDtoDAsync_v2",
                    (driver.copy)(
                        dst.address,
                        src.address,
                        (src.len.min(dst.len) / 4 * 4) as usize,
                        s.stream,
                    ),
                ),
                (ForeignWork::Fill(value), [dst]) => answered(
                    "cuMemsetD32Async",
                    (driver.memset)(
                        dst.address,
                        value.to_bits(),
                        (dst.len / 4) as usize,
                        s.stream,
                    ),
                ),
                (ForeignWork::Update(values), [dst]) => {
                    for (at, run, bits) in equal_runs(values, (dst.len / 4) as usize) {
                        answered(
                            "cuMemsetD32Async",
                            (driver.memset)(dst.address + at as u64 * 4, bits, run, s.stream),
                        )?;
                    }
                    Ok(())
                }
                (&ForeignWork::MatMul { rows, cols, batch }, _) => match &blas {
                    Some(blas) => sgemm(blas, s, [rows, cols, batch]),
                    None => Err("no cuBLAS handle".into()),
                },
                (ForeignWork::Fail, _) => Err(FOREIGN_FAILURE.to_string()),
                (ForeignWork::Panic, _) => panic!("{DELIBERATE} in a foreign operation"),
                (work, buffers) => Err(format!("{} given {} buffers", work.name(), buffers.len())),
            }
        }
    };
    // SAFETY: each call above enqueues on the stream it is given, touches
    // only the declared ranges as declared (the GEMM's checked against its
    // shape), and allocates nothing (cuBLAS runs without a workspace).
    Some(unsafe { Kernel::foreign(device, name, accesses, op) })
}
