//! NCCL through cudarc inside captured graphs: one client per GPU, each
//! capturing one graph around the same all-reduce (a foreign operation over
//! the library's buffers) followed by a builtin launch reading its output;
//! the graphs are replayed together, one thread per rank, on fresh inputs,
//! and each rank's result is checked. One GPU runs a single-rank
//! all-reduce, the same calls with a communicator of one.
//!
//! What orders what: the library orders each rank's own work (the
//! all-reduce after what wrote its input, the add after the all-reduce,
//! pins and claims of the buffers); NCCL orders the ranks against each
//! other inside the all-reduce's kernels, so the replays must be enqueued
//! on every rank, as an eager all-reduce must.
//!
//! Run with `cargo run -p backend-cuda --example nccl --features cudarc`
//! (`NCCL_RANKS=k` uses the first k GPUs). Without a usable GPU, or
//! without NCCL, it says why and exits successfully.

use std::error::Error;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use backend_cuda::{Cuda, ForeignStream, Kernel};
use capture_core::{Access, Availability, Builtin, Client, Config, Driver};
use cudarc::driver::CudaContext;
use cudarc::nccl::{result, sys};

const N: usize = 1 << 16;
const REPLAYS: usize = 10;

fn main() {
    if let Availability::Unavailable(reason) = Cuda::probe() {
        println!("nccl example: no CUDA device to run on ({reason})");
        return;
    }
    // SAFETY: only tries to load the library by the names cudarc uses.
    if !unsafe { sys::is_culib_present() } {
        println!(
            "nccl example: no NCCL library found by cudarc's names (libnccl.so and the like \
             on LD_LIBRARY_PATH)"
        );
        return;
    }
    if let Err(e) = run() {
        eprintln!("nccl example failed: {e}");
        std::process::exit(1);
    }
}

/// One rank's communicator: its calls serialized, and aborted at once when
/// any rank fails, so that no other rank waits forever for it.
struct Communicator {
    raw: sys::ncclComm_t,
    calls: Mutex<()>,
    aborted: AtomicBool,
}

// SAFETY: NCCL lets any thread use a communicator, one call at a time
// (`calls` serializes them), and abort it from another thread.
unsafe impl Send for Communicator {}
// SAFETY: as above.
unsafe impl Sync for Communicator {}

impl Communicator {
    /// Abort it, once: its operations in flight end in error.
    fn abort(&self) {
        if !self.aborted.swap(true, Ordering::SeqCst) {
            // SAFETY: the communicator is live; abort may come from any
            // thread, and it is neither aborted nor destroyed again.
            if let Err(e) = unsafe { result::comm_abort(self.raw) } {
                eprintln!("nccl example: aborting a communicator: {e:?}");
            }
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.aborted.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: the communicator is live and destroyed once, after every
        // graph using it was dropped and its work finished.
        if let Err(e) = unsafe { result::comm_destroy(self.raw) } {
            eprintln!("nccl example: destroying a communicator: {e:?}");
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let available = CudaContext::device_count()? as usize;
    let ranks = std::env::var("NCCL_RANKS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(available)
        .clamp(1, available);
    let ordinals: Vec<c_int> = (0..ranks as c_int).collect();
    let mut raw = vec![std::ptr::null_mut(); ranks];
    // SAFETY: `raw` holds one slot per device listed.
    unsafe { result::comm_init_all(raw.as_mut_ptr(), ranks as c_int, ordinals.as_ptr()) }
        .map_err(|e| format!("ncclCommInitAll: {e:?}"))?;
    let comms: Vec<Arc<Communicator>> = raw
        .into_iter()
        .map(|raw| {
            Arc::new(Communicator {
                raw,
                calls: Mutex::new(()),
                aborted: AtomicBool::new(false),
            })
        })
        .collect();

    let outcomes: Vec<Result<String, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(rank, comm)| {
                let (comm, all) = (Arc::clone(comm), &comms);
                scope.spawn(move || {
                    rank_run(rank, ranks, comm).map_err(|e| {
                        // The other ranks would wait for this one forever.
                        all.iter().for_each(|c| c.abort());
                        format!("rank {rank}: {e}")
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    });
    drop(comms);
    for outcome in &outcomes {
        match outcome {
            Ok(line) => println!("{line}"),
            Err(e) => return Err(e.clone().into()),
        }
    }
    println!(
        "nccl example: {ranks} rank(s), each an all-reduce over {N} floats captured with a \
         builtin add and replayed {REPLAYS} times together, every result as expected"
    );
    Ok(())
}

/// What rank `rank` holds before replay `round`: every element the same.
fn input(rank: usize, round: usize) -> f32 {
    ((rank + 1) * (round + 1)) as f32
}

/// One rank: its client, its graph, its replays.
fn rank_run(rank: usize, ranks: usize, comm: Arc<Communicator>) -> Result<String, Box<dyn Error>> {
    let context = CudaContext::new(rank)?;
    let device = backend_cuda::cudarc::device(&context)?;
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    let stream = client.create_stream()?;
    let op = move |s: &ForeignStream<'_>| -> Result<(), String> {
        let [send, receive] = s.buffers else {
            return Err("the all-reduce takes send and receive buffers".into());
        };
        let count = (send.len.min(receive.len) / 4) as usize;
        let _one_call = comm.calls.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the declared ranges, `count` floats each; the communicator
        // is this rank's, live and used by this call alone, on the device
        // whose context is current; the stream is the one handed over.
        unsafe {
            result::all_reduce(
                send.address as usize as *const c_void,
                receive.address as usize as *mut c_void,
                count,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                comm.raw,
                s.stream.cast(),
            )
        }
        .map(|_| ())
        .map_err(|e| format!("ncclAllReduce: {e:?}"))
    };
    // SAFETY: the all-reduce reads the send range and writes the receive
    // range, on the stream it is given, and allocates nothing once its
    // communicator is made; the communicator outlives the kernel and the
    // graph (both dropped before this function returns).
    let all_reduce = capture_core::Kernel::new(unsafe {
        Kernel::foreign(
            &device,
            "nccl_all_reduce",
            &[Access::Read, Access::Write],
            op,
        )
    }?);
    let x = client.create_f32(stream, &[input(rank, 0); N])?;
    let y = client.create_f32(stream, &[0.0; N])?;
    let one = client.create_f32(stream, &[1.0; N])?;
    let (graph, ()) = client.capture(stream, |_| {
        client.foreign(stream, &all_reduce, &[&x, &y])?;
        client.run_builtin(stream, Builtin::Add, &[&y, &one], N as u32, 0.0)
    })?;
    for round in 0..REPLAYS {
        client.write_f32(&x, &[input(rank, round); N])?;
        graph.replay()?;
        let got = client.read_f32(&y)?;
        let want = (0..ranks).map(|r| input(r, round)).sum::<f32>() + 1.0;
        if let Some((i, g)) = got.iter().enumerate().find(|(_, g)| **g != want) {
            return Err(
                format!("rank {rank}, replay {round}: y[{i}] is {g}, expected {want}").into(),
            );
        }
    }
    Ok(format!(
        "nccl example: rank {rank} on {}: {REPLAYS} replays as expected",
        Cuda::device_info(&device).name
    ))
}
