//! cudarc and this library on one GPU: cudarc makes the context, a stream
//! and a slice; the library adopts the stream, imports the slice, captures
//! a builtin launch over it and replays the graph; the result is read back
//! through the library and through cudarc.
//!
//! Run with `cargo run -p backend-cuda --example cudarc --features cudarc`.
//! Without a usable GPU it says why and exits successfully.

use std::error::Error;
use std::sync::Arc;

use backend_cuda::Cuda;
use capture_core::{Availability, Builtin, Client, Config, Driver};
use cudarc::driver::CudaContext;

const N: usize = 1024;

fn main() {
    // Asked first through this library, which reports a missing driver or
    // device as a reason; cudarc's loader would panic instead.
    if let Availability::Unavailable(reason) = Cuda::probe() {
        println!("cudarc example: no CUDA device to run on ({reason})");
        return;
    }
    if let Err(e) = run() {
        eprintln!("cudarc example failed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let context = CudaContext::new(0)?;
    let cuda_stream = context.new_stream()?;
    let slice = cuda_stream.clone_htod(&[1.0f32; N])?;

    let device = backend_cuda::cudarc::device(&context)?;
    let client = Client::<Cuda>::with_device(Arc::clone(&device), Config::default());
    // SAFETY: cudarc issues nothing on this stream while the window below
    // records.
    let adopted = unsafe { backend_cuda::cudarc::stream(&device, &cuda_stream)? };
    let stream = client.adopt_stream(adopted)?;
    let page = backend_cuda::cudarc::import(&device, slice).map_err(|rejected| rejected.error)?;
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)?;
    let one = client.create_f32(stream, &[1.0; N])?;

    let (graph, ()) = client.capture(stream, |_| {
        client.run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)
    })?;
    for _ in 0..3 {
        graph.replay()?;
    }
    let values = client.read_f32(&x)?;
    // One warmup and three replays, each adding one.
    let expected = 5.0;
    if values.iter().any(|&v| v != expected) {
        return Err(format!("expected {expected} everywhere, read {:?}", &values[..4]).into());
    }

    // The same memory read by cudarc, at the address the library gives.
    let address = backend_cuda::cudarc::buffer_ptr(&client, &x)?;
    let mut host = vec![0.0f32; N];
    client.sync(stream)?;
    context.bind_to_thread()?;
    // SAFETY: the address is the buffer's, alive while `x` is, N floats
    // long; the library's work on it is done (synced above).
    unsafe {
        cudarc::driver::result::memcpy_dtoh_sync(&mut host, address)?;
    }
    println!(
        "cudarc example: {} on {}: {N} floats at {address:#x}, {} after capture and replays",
        env!("CARGO_PKG_NAME"),
        Cuda::device_info(&device).name,
        host[0]
    );
    Ok(())
}
