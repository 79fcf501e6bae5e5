//! User kernels: built from each backend's own sources, checked against
//! their signatures at every launch (rule 17), captured with their by-value
//! parameters, and a whole decode step replayed.

use graph_capture::{Error, Params, Phase};

use crate::ensure;
use crate::session::Session;
use crate::support::{Outcome, Step, expect, ramp, refused, usable};
use crate::workload::decode::{Decoder, Model, Shape, TOLERANCE, relative_error};
use crate::workload::{UserKernel, UserKernels, Workload, grid};

const N: usize = 256;
const NU: u32 = N as u32;

fn workload<D: UserKernels>(session: &Session<D>) -> Result<Workload<D>, String> {
    Workload::new(session.device()).map_err(|err| format!("building the kernels: {err}"))
}

fn scale_params(n: u32, a: f32, b: f32) -> Params {
    Params::new().u32(n).f32(a).f32(b)
}

/// A user kernel with by-value parameters, captured and replayed, computes
/// what it computes eagerly.
pub fn user_kernel_replay_matches_eager<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = workload(session)?;
    let eager = client.create_f32(stream, &ramp(N, 1.0)).step("eager x")?;
    let replayed = client
        .create_f32(stream, &ramp(N, 1.0))
        .step("replayed x")?;
    for _ in 0..3 {
        k.scale(&client, stream, grid(NU), &eager, NU, 2.0, 1.0)
            .step("eager launch")?;
    }
    let (graph, ()) = client
        .capture(stream, |_| {
            k.scale(&client, stream, grid(NU), &replayed, NU, 2.0, 1.0)
        })
        .step("capture")?;
    // Warmup ran the launch once for real; two replays make three.
    client.replay(&graph).step("replay 1")?;
    client.replay(&graph).step("replay 2")?;
    let want: Vec<f32> = ramp(N, 1.0)
        .into_iter()
        .map(|v| ((v * 2.0 + 1.0) * 2.0 + 1.0) * 2.0 + 1.0)
        .collect();
    expect(&client, &eager, &want, "eager")?;
    expect(&client, &replayed, &want, "replayed")
}

/// A graph replays the parameter bytes it was recorded with, whatever the
/// caller's bytes hold later, and each graph keeps its own.
#[allow(unsafe_code)]
pub fn by_value_params_replay_their_recorded_value<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = workload(session)?;
    // SAFETY: every launch below passes n = NU, the length of x.
    let scale = unsafe { k.kernel(UserKernel::Scale) };
    let x = client.create_f32(stream, &[1.0; N]).step("x")?;
    let mut bytes = scale_params(NU, 3.0, 0.0).as_bytes().to_vec();
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    client
        .launch(stream, scale, grid(NU), &[&x], &[], &bytes)
        .step("recorded launch")?;
    // The caller's bytes change before the window closes and after.
    bytes.copy_from_slice(scale_params(NU, 100.0, 5.0).as_bytes());
    let triple = client.instantiate(stream, window).step("instantiate")?;
    bytes.copy_from_slice(scale_params(NU, -1.0, 0.0).as_bytes());
    let window = client.prepare(stream).step("second prepare")?;
    client.begin(stream, window).step("second begin")?;
    client
        .launch(
            stream,
            scale,
            grid(NU),
            &[&x],
            &[],
            scale_params(NU, 1.0, 0.5).as_bytes(),
        )
        .step("second recorded launch")?;
    let plus_half = client
        .instantiate(stream, window)
        .step("second instantiate")?;
    expect(&client, &x, &[1.0; N], "recording ran nothing")?;
    client.replay(&triple).step("replay triple")?;
    client.replay(&triple).step("replay triple again")?;
    expect(&client, &x, &[9.0; N], "two replays of x * 3")?;
    client.replay(&plus_half).step("replay + 0.5")?;
    client.replay(&triple).step("replay triple a third time")?;
    expect(&client, &x, &[28.5; N], "(9 + 0.5) * 3")
}

/// Every way a launch can disagree with its kernel's signature is refused
/// before it reaches the driver and changes nothing; inside a window it
/// also dooms the window, which would otherwise seal without the launch.
#[allow(unsafe_code)]
pub fn rule_17_launch_mismatches_are_refused<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = workload(session)?;
    // SAFETY: every launch below that matches its signature passes n = NU,
    // the length of x and y; the others are refused before any device.
    let (scale, residual) =
        unsafe { (k.kernel(UserKernel::Scale), k.kernel(UserKernel::Residual)) };
    let x = client.create_f32(stream, &ramp(N, 1.0)).step("x")?;
    let y = client.create_f32(stream, &ramp(N, 1.0)).step("y")?;
    client.sync(stream).step("sync")?;
    let before = client.usage(stream).step("usage")?;
    let good = scale_params(NU, 2.0, 0.0);
    let max = client.device_info().max_groups;
    let too_wide = [max[0].saturating_add(1), 1, 1];
    let cases: [(&str, Result<(), Error>); 9] = [
        (
            "a binding too few",
            client.launch(
                stream,
                residual,
                grid(NU),
                &[&x],
                &[],
                Params::new().u32(NU).as_bytes(),
            ),
        ),
        (
            "a binding too many",
            client.launch(stream, scale, grid(NU), &[&x, &y], &[], good.as_bytes()),
        ),
        (
            "info bytes to a kernel that reads none",
            client.launch(stream, scale, grid(NU), &[&x], &[0; 4], good.as_bytes()),
        ),
        (
            "a parameter too few",
            client.launch(
                stream,
                scale,
                grid(NU),
                &[&x],
                &[],
                Params::new().u32(NU).f32(2.0).as_bytes(),
            ),
        ),
        (
            "a parameter byte too many",
            client.launch(stream, scale, grid(NU), &[&x], &[], &[0; 13]),
        ),
        (
            "an empty grid",
            client.launch(stream, scale, [0, 1, 1], &[&x], &[], good.as_bytes()),
        ),
        (
            "a grid past the device's limit",
            client.launch(stream, scale, too_wide, &[&x], &[], good.as_bytes()),
        ),
        (
            "a grid past the limit in z",
            client.launch(
                stream,
                scale,
                [1, 1, max[2].saturating_add(1)],
                &[&x],
                &[],
                good.as_bytes(),
            ),
        ),
        (
            "a written buffer bound twice",
            client.launch(
                stream,
                residual,
                grid(NU),
                &[&x, &x],
                &[],
                Params::new().u32(NU).as_bytes(),
            ),
        ),
    ];
    for (what, result) in cases {
        let err = refused(result, what)?;
        ensure!(
            matches!(err, Error::KernelMismatch { .. }),
            "{what}: expected a mismatch, got {err}"
        );
    }
    expect(&client, &x, &ramp(N, 1.0), "x untouched")?;
    expect(&client, &y, &ramp(N, 1.0), "y untouched")?;
    ensure!(
        client.claimed_buffers() == 0,
        "a refused launch claims nothing"
    );
    let after = client.usage(stream).step("usage")?;
    ensure!(
        after.device == before.device && after.info_entries == before.info_entries,
        "a refused launch staged nothing: {before:?} then {after:?}"
    );

    // Inside a window: refused, and the window can no longer seal.
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    client
        .launch(stream, scale, grid(NU), &[&x], &[], good.as_bytes())
        .step("a good recorded launch")?;
    let err = refused(
        client.launch(stream, scale, grid(NU), &[&x], &[], &[0; 4]),
        "a bad recorded launch",
    )?;
    ensure!(matches!(err, Error::KernelMismatch { .. }), "got {err}");
    let err = refused(client.instantiate(stream, window), "a doomed window")?;
    ensure!(
        matches!(&err, Error::Doomed(cause) if matches!(**cause, Error::KernelMismatch { .. })),
        "the window names the refused launch: {err}"
    );
    ensure!(
        client.phase(stream).step("phase")? == Phase::None,
        "window closed"
    );
    // The refusal claimed what the recording would have written.
    ensure!(
        matches!(client.read(&x), Err(Error::Claimed { .. })),
        "x claimed"
    );
    client.write_f32(&x, &ramp(N, 1.0)).step("rewrite x")?;
    // And a matching launch still runs.
    client
        .launch(
            stream,
            residual,
            grid(NU),
            &[&x, &y],
            &[],
            Params::new().u32(NU).as_bytes(),
        )
        .step("a matching launch")?;
    let doubled: Vec<f32> = ramp(N, 1.0).iter().map(|v| v * 2.0).collect();
    expect(&client, &x, &doubled, "x += y")?;
    usable(&client, stream)
}

/// A kernel's grid is honoured as a GPU honours it: one workgroup of 64
/// threads touches 64 elements, whatever the element count says.
pub fn the_grid_bounds_the_work<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = workload(session)?;
    let x = client.create_f32(stream, &[1.0; 1000]).step("x")?;
    k.scale(&client, stream, [1, 1, 1], &x, 1000, 1.0, 4.0)
        .step("one workgroup")?;
    let mut want = vec![1.0f32; 1000];
    want[..64].fill(5.0);
    expect(&client, &x, &want, "only the first workgroup's elements")?;
    // Two groups in y spill past x: elements 64..128 (group (0, 1) of a
    // 1 x 2 grid).
    k.scale(&client, stream, [1, 2, 1], &x, 1000, 1.0, 1.0)
        .step("a 1 x 2 grid")?;
    want[..128].iter_mut().for_each(|v| *v += 1.0);
    expect(&client, &x, &want, "two workgroups")
}

/// A kernel whose source does not compile is an error that carries the
/// compiler's log.
pub fn a_kernel_that_fails_to_compile_reports_its_log<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    match D::broken_kernel(session.device()) {
        Ok(_) => Err("a broken kernel was built".into()),
        Err(Error::Compile { kernel, log }) => {
            ensure!(!kernel.is_empty(), "the error names the kernel");
            ensure!(
                log.trim().len() > 10,
                "the error carries a log, got {log:?}"
            );
            // The device is still usable after the failed build.
            let client = session.client();
            let stream = client.create_stream().step("stream")?;
            usable(&client, stream)
        }
        Err(other) => Err(format!("expected a compile error, got {other}")),
    }
}

/// Code whose interface disagrees with the signature it is given is
/// refused where the backend can read the interface (Vulkan reflects the
/// SPIR-V module; CUDA asks the driver for the parameter count). Backends
/// that cannot read it rely on the caller's promise.
pub fn a_kernel_disagreeing_with_its_signature_is_refused<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    match D::disagreeing_kernel(session.device()) {
        None => Ok(()),
        Some(Ok(_)) => Err("a kernel whose code disagrees with its signature was built".into()),
        Some(Err(Error::Compile { log, .. })) => {
            ensure!(!log.is_empty(), "the refusal says what disagrees");
            Ok(())
        }
        Some(Err(other)) => Err(format!("expected a compile error, got {other}")),
    }
}

/// A decode step of user kernels, replayed 100 times, computes what 100
/// eager steps compute, and both match the plain-Rust reference.
pub fn decode_step_replayed_matches_eager<D: UserKernels>(session: &Session<D>) -> Outcome {
    const STEPS: usize = 100;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let model = Model::new(Shape::SMALL);
    let eager = Decoder::new(&client, stream, &model).step("eager decoder")?;
    let graphed = Decoder::new(&client, stream, &model).step("graphed decoder")?;
    for _ in 0..STEPS {
        eager.step().step("eager step")?;
    }
    let graph = graphed.capture().step("capture")?;
    graphed.reset(&model).step("reset after warmup")?;
    for _ in 0..STEPS {
        client.replay(&graph).step("replay")?;
    }
    let eager_x = eager.read().step("read eager")?;
    let graphed_x = graphed.read().step("read replayed")?;
    crate::support::same(&graphed_x, &eager_x, "replayed vs eager")?;
    let reference = model.reference(STEPS);
    let error = relative_error(&eager_x, &reference);
    // NaN is no pass: compared so that only a finite error within the
    // tolerance holds.
    let within = error.is_finite() && error <= TOLERANCE;
    ensure!(
        within,
        "{STEPS} steps are {error:e} from the reference (tolerance {TOLERANCE:e})"
    );
    Ok(())
}

/// `y += a * x` is computed unfused on every backend (the product rounded,
/// then the sum), so all of them give the same bits: with these values a
/// fused multiply-add would give 2^-24 where the unfused form gives 0.
pub fn axpy_is_not_fused<D: UserKernels>(session: &Session<D>) -> Outcome {
    use graph_capture::Builtin;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let a = 1.0 + f32::EPSILON * 2048.0; // 1 + 2^-12
    let x = client.create_f32(stream, &[a; N]).step("x")?;
    let y = client
        .create_f32(stream, &[-(1.0 + f32::EPSILON * 4096.0); N])
        .step("y")?;
    client
        .run_builtin(stream, Builtin::Axpy, &[&x, &y], NU, a)
        .step("axpy")?;
    let got = client.read_f32(&y).step("read y")?;
    let fused = a.mul_add(a, -(1.0 + f32::EPSILON * 4096.0));
    ensure!(fused != 0.0, "the values tell fused from unfused");
    ensure!(
        got.iter().all(|&v| v == 0.0),
        "y = {} (fused would give {fused:e}); the product must be rounded before the sum",
        got[0]
    );
    Ok(())
}

/// A binding whose length is not a whole number of elements: a builtin sees
/// its whole elements, eagerly and replayed, and the bytes past them stay
/// as they were. The stream stays usable after.
pub fn a_kernel_sees_the_whole_elements_of_its_binding<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    use graph_capture::Builtin;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let before = [0xAB_u8; 10];
    let x = client.create(stream, &before).step("x, 10 bytes")?;
    let y = client.create(stream, &before).step("y, 10 bytes")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], 2, 3.0)
        .step("fill 2 elements of 10 bytes")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Fill, &[&y], 2, 5.0)
        })
        .step("capture a fill of 10 bytes")?;
    client.write(&y, &before).step("rewrite y")?;
    client.replay(&graph).step("replay")?;
    for (buffer, value, what) in [(&x, 3.0_f32, "eager"), (&y, 5.0, "replayed")] {
        let got = client.read(buffer).step(what)?;
        let mut want = value.to_le_bytes().repeat(2);
        want.extend_from_slice(&before[8..]);
        ensure!(
            got == want,
            "{what} fill over 10 bytes gave {got:?}, expected {want:?}"
        );
    }
    client.sync(stream).step("sync after")?;
    usable(&client, stream)
}

/// A graph keeps every kernel it recorded alive (rule 19): with every
/// kernel handle and the input dropped, a hundred replays still run the
/// recorded work.
pub fn rule_19_a_graph_keeps_its_kernels<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = workload(session)?;
    let x = client.create_f32(stream, &[1.0; N]).step("x")?;
    let y = client.create_f32(stream, &[1.0; N]).step("y")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            k.residual(&client, stream, &x, &y, NU)?;
            k.scale(&client, stream, grid(NU), &x, NU, 1.0, 0.5)
        })
        .step("capture")?;
    // Every handle of every kernel goes, and the input with them.
    drop((k, y));
    for _ in 0..100 {
        client.replay(&graph).step("replay")?;
    }
    // Warmup and each replay add 1.5 to each element, exactly.
    expect(&client, &x, &[1.0 + 101.0 * 1.5; N], "after 100 replays")?;
    ensure!(
        client.graph_info(&graph).step("info")?.launches == 2,
        "the graph holds its two launches"
    );
    drop(graph);
    usable(&client, stream)
}
