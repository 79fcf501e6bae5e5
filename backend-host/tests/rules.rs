//! One named test per rule of the design, on the host backend. Each runs
//! the conformance scenario that proves the rule, so the scenario is written
//! once and these names say which rule failed.

use backend_host::Host;

fn run(scenario: &str) {
    if let Err(failure) = conformance::run_named::<Host>(scenario) {
        panic!("{scenario}: {failure}");
    }
}

#[test]
fn rule_01_refused_step_changes_nothing() {
    run("rule_01_out_of_order_calls_change_nothing");
}

#[test]
fn rule_02_refused_begin_leaves_stream_as_found() {
    run("rule_02_refused_begin_leaves_stream_as_found");
}

#[test]
fn rule_03_window_closed_from_prepared_disarms() {
    run("rule_03_close_from_prepared_disarms");
}

#[test]
fn rule_04_instantiate_leaves_capture_mode_first() {
    run("rule_04_instantiate_always_leaves_capture_mode");
}

#[test]
fn rule_05_failed_window_never_becomes_a_graph() {
    run("rule_05_claimed_input_dooms_the_window");
    run("rule_05_refused_instantiate_closes_the_recording");
}

#[test]
fn rule_06_foreign_close_yields_no_graph() {
    run("rule_06_foreign_close_yields_no_graph");
}

#[test]
fn rule_07_allocation_while_recording_is_refused() {
    run("rule_07_page_allocated_while_recording_is_refused");
}

#[test]
fn rule_08_no_host_sync_while_recording() {
    run("rule_08_host_sync_refused_while_recording");
}

#[test]
fn rule_09_every_refusal_claims_its_written_set() {
    run("rule_09_refusal_claims_the_written_set");
    run("rule_09_refused_launch_in_window_claims_everything");
}

#[test]
fn rule_10_graph_pins_what_it_touches() {
    run("rule_10_intermediates_freed_in_capture_stay_pinned");
    run("rule_10_graph_pins_buffers_the_user_dropped");
}

#[test]
fn rule_11_replay_of_unknown_graph_is_refused() {
    run("rule_11_replay_of_a_destroyed_graph_is_refused");
}

#[test]
fn rule_12_refused_replay_claims_then_good_replay_clears() {
    run("rule_12_refused_replay_claims_then_good_replay_clears");
}

#[test]
fn rule_13_destroy_syncs_releases_and_is_idempotent() {
    run("rule_13_double_destroy_is_a_no_op");
    run("rule_13_destroy_while_replay_in_flight");
    run("rule_13_destroy_releases_pins");
}

#[test]
fn rule_14_upload_is_best_effort() {
    run("rule_14_upload_failure_is_not_fatal");
}

#[test]
fn rule_15_other_streams_are_not_recorded_or_blocked() {
    run("rule_15_other_streams_are_not_recorded_or_blocked");
}

#[test]
fn rule_16_thousand_replays_keep_usage_flat() {
    run("rule_16_thousand_replays_keep_usage_flat");
}

#[test]
fn rule_19_a_graph_keeps_every_kernel_it_recorded() {
    run("rule_19_a_graph_keeps_its_kernels");
    // The closure itself is what stays alive: it holds a token whose count
    // says so, with every handle of the kernel dropped.
    use capture_core::{Access, Client, Kernel, Params, Signature};
    let token = std::sync::Arc::new(());
    let held = token.clone();
    let kernel = backend_host::Kernel::new(
        Signature::new("add_one").binding(Access::ReadWrite),
        move |group, buffers| {
            let _alive = &held;
            let x = buffers[0].f32_mut()?;
            for i in group.elements_x(x.len()) {
                x[i] += 1.0;
            }
            Ok(())
        },
    )
    .expect("kernel");
    let client = Client::<Host>::open().expect("open");
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[0.0]).expect("x");
    let kernel = Kernel::new(kernel);
    let (graph, ()) = client
        .capture(stream, |_| {
            client.launch(
                stream,
                &kernel,
                [1, 1, 1],
                &[&x],
                &[],
                Params::new().as_bytes(),
            )
        })
        .expect("capture");
    drop(kernel);
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        2,
        "the closure is alive"
    );
    for _ in 0..100 {
        graph.replay().expect("replay");
    }
    assert_eq!(client.read_f32(&x).expect("read"), [101.0]);
    drop(graph);
    client.sync(stream).expect("sync");
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        1,
        "the destroyed graph let it go"
    );
}
