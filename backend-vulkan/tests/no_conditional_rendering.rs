//! A device opened without `VK_EXT_conditional_rendering` refuses to record
//! a conditional, saying why, and still runs one eagerly. Alone in its test
//! binary: it sets the variable that opens devices without the extension.

use backend_vulkan::{NO_CONDITIONAL_RENDERING_ENV, Vulkan};
use capture_core::{Builtin, Client, Error, Ran};

#[test]
fn a_device_without_conditional_rendering_refuses_recorded_conditionals_only() {
    // SAFETY: no other thread of this test binary reads the environment.
    unsafe { std::env::set_var(NO_CONDITIONAL_RENDERING_ENV, "1") };
    let client = match Client::<Vulkan>::open() {
        Ok(client) => client,
        Err(err) => {
            eprintln!("skipped: {err}");
            return;
        }
    };
    let stream = client.create_stream().expect("stream");
    let flag = client.create(stream, &1u32.to_le_bytes()).expect("flag");
    let x = client.create_f32(stream, &[0.0; 64]).expect("x");
    let ones = client.create_f32(stream, &[1.0; 64]).expect("ones");
    let add = || client.run_builtin(stream, Builtin::Add, &[&x, &ones], 64, 0.0);
    let recorded = client.capture(stream, |_| client.if_flag(stream, &flag, add));
    let err = recorded.expect_err("recorded without conditional rendering");
    match err.root() {
        Error::NoConditionals { backend, reason } => {
            assert_eq!(*backend, "vulkan");
            assert!(reason.contains("VK_EXT_conditional_rendering"), "{reason}");
        }
        other => panic!("another refusal: {other}"),
    }
    // The warmup ran the body once; an eager run adds once more.
    assert_eq!(
        client.if_flag(stream, &flag, add).expect("eager"),
        Ran::Branch(Some(0))
    );
    assert_eq!(client.read_f32(&x).expect("x"), vec![2.0; 64]);
}
