//! cuBLAS through cudarc inside a captured step: an SGEMM (`y = x wᵀ`, a
//! decode step's projection) issued as a foreign operation over the
//! library's buffers, followed by a builtin launch that reads its output;
//! captured once, replayed on fresh inputs, each replay checked against a
//! CPU GEMM.
//!
//! Run with `cargo run -p backend-cuda --example cublas --features cudarc`.
//! Without a usable GPU, or without cuBLAS, it says why and exits
//! successfully.

use std::error::Error;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};

use backend_cuda::{Cuda, ForeignStream, Kernel};
use capture_core::{Access, Availability, Builtin, Client, Config, Driver};
use cudarc::cublas::{CudaBlas, result, sys};
use cudarc::driver::CudaContext;

const ROWS: usize = 256;
const COLS: usize = 512;
const BATCH: usize = 8;
const REPLAYS: usize = 10;

fn main() {
    if let Availability::Unavailable(reason) = Cuda::probe() {
        println!("cublas example: no CUDA device to run on ({reason})");
        return;
    }
    // SAFETY: only tries to load the library by the names cudarc uses.
    if !unsafe { sys::is_culib_present() } {
        println!(
            "cublas example: no cuBLAS library found by cudarc's names (put its folder on \
             LD_LIBRARY_PATH)"
        );
        return;
    }
    if let Err(e) = run() {
        eprintln!("cublas example failed: {e}");
        std::process::exit(1);
    }
}

/// A deterministic value in [-1, 1) for element `i` of input `seed`.
fn value(seed: usize, i: usize) -> f32 {
    let x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (seed as u64) << 17;
    ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// `y = x wᵀ + bias` on the CPU, in f64.
fn reference(w: &[f32], x: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0f32; BATCH * ROWS];
    for b in 0..BATCH {
        for r in 0..ROWS {
            let dot: f64 = (0..COLS)
                .map(|c| f64::from(x[b * COLS + c]) * f64::from(w[r * COLS + c]))
                .sum();
            y[b * ROWS + r] = dot as f32 + bias[b * ROWS + r];
        }
    }
    y
}

fn run() -> Result<(), Box<dyn Error>> {
    let context = CudaContext::new(0)?;
    let cuda_stream = context.new_stream()?;
    let blas = CudaBlas::new(Arc::clone(&cuda_stream))?;
    let blas = Arc::new(Mutex::new(blas));

    let device = backend_cuda::cudarc::device(&context)?;
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream()?;

    let sgemm_blas = Arc::clone(&blas);
    let op = move |s: &ForeignStream<'_>| -> Result<(), String> {
        let [w, x, y] = s.buffers else {
            return Err("sgemm takes w, x and y".into());
        };
        let holds = |len: u64, elements: usize| len / 4 >= elements as u64;
        if !(holds(w.len, ROWS * COLS) && holds(x.len, BATCH * COLS) && holds(y.len, BATCH * ROWS))
        {
            return Err("sgemm's buffers are too short for its shape".into());
        }
        let blas = sgemm_blas.lock().unwrap_or_else(PoisonError::into_inner);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major: yᵀ (ROWS x BATCH) = (w stored COLS x ROWS)ᵀ xᵀ.
        // SAFETY: the handle is used under its lock, on the stream handed
        // over; w, x and y are the declared ranges, each holding the
        // elements the shape touches (checked above).
        // No workspace: setting the stream hands cuBLAS its default pool
        // back, which it may allocate from, and a workspace of our own would
        // be shared by graphs replaying at once.
        unsafe {
            result::set_stream(*blas.handle(), s.stream.cast())
                .and_then(|()| {
                    sys::cublasSetWorkspace_v2(*blas.handle(), std::ptr::null_mut(), 0).result()
                })
                .and_then(|()| {
                    result::sgemm(
                        *blas.handle(),
                        sys::cublasOperation_t::CUBLAS_OP_T,
                        sys::cublasOperation_t::CUBLAS_OP_N,
                        ROWS as c_int,
                        BATCH as c_int,
                        COLS as c_int,
                        &alpha,
                        w.address as usize as *const f32,
                        COLS as c_int,
                        x.address as usize as *const f32,
                        COLS as c_int,
                        &beta,
                        y.address as usize as *mut f32,
                        ROWS as c_int,
                    )
                })
                .map_err(|e| format!("cuBLAS: {e:?}"))
        }
    };
    // SAFETY: the SGEMM reads w and x and writes y, within their declared
    // ranges (checked against its shape), on the stream it is given; with
    // no workspace cuBLAS allocates nothing; the handle lives as long as
    // the kernel.
    let sgemm = capture_core::Kernel::new(unsafe {
        Kernel::foreign(
            &device,
            "cublas_sgemm",
            &[Access::Read, Access::Read, Access::Write],
            op,
        )
    }?);

    let weights: Vec<f32> = (0..ROWS * COLS).map(|i| value(0, i)).collect();
    let bias: Vec<f32> = (0..BATCH * ROWS).map(|i| value(1, i) * 0.1).collect();
    let w = client.create_f32(stream, &weights)?;
    let x = client.create_f32(stream, &[0.0; BATCH * COLS])?;
    let y = client.create_f32(stream, &[0.0; BATCH * ROWS])?;
    let b = client.create_f32(stream, &bias)?;
    let n = (BATCH * ROWS) as u32;
    let (graph, ()) = client.capture(stream, |_| {
        client.foreign(stream, &sgemm, &[&w, &x, &y])?;
        client.run_builtin(stream, Builtin::Add, &[&y, &b], n, 0.0)
    })?;

    let mut worst = 0.0f32;
    for round in 0..REPLAYS {
        let input: Vec<f32> = (0..BATCH * COLS).map(|i| value(round + 2, i)).collect();
        client.write_f32(&x, &input)?;
        graph.replay()?;
        let got = client.read_f32(&y)?;
        let want = reference(&weights, &input, &bias);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            let error = (g - e).abs() / e.abs().max(1.0);
            worst = worst.max(error);
            if error > 1e-3 {
                return Err(format!("replay {round}: y[{i}] is {g}, the CPU GEMM says {e}").into());
            }
        }
    }
    println!(
        "cublas example: {} on {}: SGEMM {ROWS}x{COLS} over a batch of {BATCH} as a foreign \
         operation, captured with a builtin add and replayed {REPLAYS} times on fresh inputs; \
         largest relative error against a CPU GEMM {worst:.2e}",
        env!("CARGO_PKG_NAME"),
        Cuda::device_info(&device).name,
    );
    drop(graph);
    drop(sgemm);
    drop(blas);
    Ok(())
}
