//! Every scenario, written once, generic over the backend.

use crate::workload::UserKernels;
mod conditionals;
mod decoder;
mod dependencies;
mod faults;
mod foreign;
mod graphs;
mod imports;
mod kernels;
mod lifetimes;
mod replay;
mod scale;
mod state;
mod streams;
mod temporaries;
mod threads;
mod updates;

pub use updates::{DOT_DIR, write_dot_to};

use crate::session::Session;
use crate::support::Outcome;

/// One scenario: a name, unique in the suite, and its body.
pub struct Scenario<D: UserKernels> {
    /// The trial name's second half (`host::<name>`).
    pub name: &'static str,
    /// Runs the scenario; `Err` says what was wrong.
    pub run: fn(&Session<D>) -> Outcome,
}

impl<D: UserKernels> Clone for Scenario<D> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<D: UserKernels> Copy for Scenario<D> {}

macro_rules! suite {
    ($($module:ident :: $name:ident),* $(,)?) => {
        /// Every scenario of the suite, in a fixed order.
        pub fn scenarios<D: UserKernels>() -> Vec<Scenario<D>> {
            vec![$(Scenario { name: stringify!($name), run: $module::$name::<D> }),*]
        }
    };
}

suite![
    replay::replay_matches_eager,
    replay::replay_count_visible_in_add_chain,
    replay::input_rewritten_between_replays_is_read_fresh,
    replay::one_call_capture_warms_up_then_records,
    replay::recorded_write_replays_its_bytes,
    replay::rule_10_intermediates_freed_in_capture_stay_pinned,
    replay::rule_10_graph_pins_buffers_the_user_dropped,
    state::rule_01_out_of_order_calls_change_nothing,
    state::rule_03_close_from_prepared_disarms,
    state::rule_04_instantiate_always_leaves_capture_mode,
    state::a_doomed_windows_info_is_never_served,
    state::rule_06_foreign_close_yields_no_graph,
    state::rule_08_host_sync_refused_while_recording,
    state::bad_input_is_refused_and_loses_nothing,
    state::handles_of_another_client_are_refused,
    kernels::user_kernel_replay_matches_eager,
    kernels::by_value_params_replay_their_recorded_value,
    kernels::rule_17_launch_mismatches_are_refused,
    kernels::the_grid_bounds_the_work,
    kernels::a_kernel_that_fails_to_compile_reports_its_log,
    kernels::a_kernel_disagreeing_with_its_signature_is_refused,
    kernels::decode_step_replayed_matches_eager,
    kernels::axpy_is_not_fused,
    kernels::a_kernel_sees_the_whole_elements_of_its_binding,
    kernels::rule_19_a_graph_keeps_its_kernels,
    decoder::transformer_eager_tokens_match_the_reference,
    decoder::transformer_replayed_tokens_match_the_reference,
    decoder::transformer_with_foreign_matmuls_matches_the_reference,
    decoder::transformer_graphs_follow_the_live_sequences,
    decoder::transformer_generation_in_one_replay_matches_the_reference,
    updates::rule_18_recapture_in_place_gives_the_new_results,
    updates::rule_18_recapture_with_another_shape_reinstantiates,
    updates::rule_18_a_refused_update_leaves_the_old_graph,
    updates::a_failed_body_seals_nothing,
    updates::rule_18_old_pins_are_released_after_the_old_replays,
    updates::graph_cache_counts_and_evicts,
    updates::a_graph_draws_its_dependencies,
    conditionals::if_true_and_false_replay_like_eager,
    conditionals::while_runs_zero_one_k_and_bound_iterations,
    conditionals::a_loop_nested_in_an_if_replays_like_eager,
    conditionals::a_hundred_replays_reset_by_kernels_and_independent_bodies,
    conditionals::recapture_of_a_graph_with_conditionals,
    conditionals::failing_bodies_seal_nothing_and_allocating_ones_replay,
    conditionals::info_first_met_in_a_skipped_body_is_never_reused_outside_it,
    conditionals::what_a_body_cannot_hold_is_refused,
    conditionals::a_refused_node_creation_loses_nothing,
    dependencies::eight_independent_chains_are_one_chain_deep_and_eight_wide,
    dependencies::hazards_of_every_kind_replay_a_thousand_times_like_eager,
    dependencies::views_of_one_buffer_replay_a_thousand_times_like_eager,
    dependencies::an_update_in_place_keeps_the_edges_of_the_new_work,
    temporaries::two_graphs_share_their_temporaries_and_replay_in_turn_like_eager,
    temporaries::what_the_caller_keeps_is_not_shared,
    temporaries::destroying_one_graph_of_a_set_keeps_the_others,
    temporaries::temporaries_stay_on_their_stream,
    temporaries::a_temporary_read_before_written_is_refused,
    temporaries::a_refused_replay_leaves_its_temporaries_no_obstacle,
    updates::two_clients_on_two_devices,
    graphs::rule_07_page_allocated_while_recording_is_refused,
    graphs::a_recording_may_pass_info_its_warmup_did_not,
    graphs::rule_05_claimed_input_dooms_the_window,
    graphs::rule_09_refusal_claims_the_written_set,
    graphs::rule_11_replay_of_a_destroyed_graph_is_refused,
    graphs::rule_13_double_destroy_is_a_no_op,
    graphs::rule_13_destroy_while_replay_in_flight,
    graphs::rule_13_destroy_releases_pins,
    graphs::shared_info_entries_outlive_one_graph,
    graphs::destroy_during_recording_is_deferred,
    graphs::claimed_input_refuses_replay,
    graphs::replay_refuses_an_accumulator_claimed_elsewhere,
    foreign::foreign_copy_between_kernels_replays_like_eager,
    foreign::foreign_writes_are_ordered_across_streams,
    foreign::foreign_operations_take_their_place_in_the_dependency_graph,
    foreign::foreign_operations_keep_their_buffers_in_a_graph,
    foreign::foreign_refusals_claim_what_they_write,
    foreign::foreign_bad_input_is_refused_and_loses_nothing,
    foreign::foreign_code_that_fails_or_panics_is_reported,
    foreign::foreign_operations_in_a_conditional_body,
    foreign::foreign_operations_from_several_threads,
    faults::rule_02_refused_begin_leaves_stream_as_found,
    faults::rule_05_refused_instantiate_closes_the_recording,
    faults::rule_09_refused_launch_in_window_claims_everything,
    faults::rule_12_refused_replay_claims_then_good_replay_clears,
    faults::a_failure_after_a_failed_replay_refuses_its_retry,
    faults::rule_14_upload_failure_is_not_fatal,
    faults::refused_page_allocation_loses_nothing,
    faults::refused_eager_launch_claims_its_outputs,
    faults::refused_copy_claims_its_destination,
    faults::refused_fence_keeps_deferred_frees,
    faults::refused_fence_on_read_keeps_its_staging,
    faults::claims_on_dropped_buffers_are_not_kept,
    faults::destroy_with_a_failed_sync_keeps_the_pins_fenced,
    faults::every_capture_fault_recovers,
    faults::a_failed_write_to_a_view_claims_the_buffer_until_all_of_it_is_written,
    scale::rule_15_other_streams_are_not_recorded_or_blocked,
    scale::capture_past_the_drop_queue_threshold,
    scale::ten_thousand_launch_capture,
    scale::rule_16_thousand_replays_keep_usage_flat,
    scale::capture_destroy_cycles_keep_usage_flat,
    scale::capture_across_threads,
    threads::a_read_on_a_busy_stream_does_not_block_another_stream,
    threads::two_threads_on_one_stream_never_record_silently,
    threads::a_recording_takes_only_its_threads_work,
    threads::every_refused_call_dooms_its_window,
    threads::a_panicking_capture_leaves_nothing,
    threads::destroying_a_stream_another_thread_uses,
    threads::stress_four_threads_against_a_model,
    threads::stress_four_threads_with_tiny_pages,
    streams::rule_20_producer_and_consumer_on_two_streams,
    streams::rule_20_write_after_read_across_streams,
    streams::rule_20_memory_another_stream_uses_is_not_reused,
    streams::rule_20_claims_follow_a_buffer_to_every_stream,
    streams::rule_20_no_wait_for_what_a_stream_already_waited_past,
    streams::rule_20_a_graph_over_another_streams_buffer_replays_in_order,
    streams::rule_21_fork_join_capture_replays_like_eager,
    streams::rule_21_an_unjoined_close_is_refused,
    streams::rule_21_a_recording_never_waits_for_outside_work,
    streams::rule_21_a_joined_streams_own_work_stays_ordered,
    streams::rule_20_a_destroyed_streams_memory_stays_while_others_use_it,
    streams::rule_20_four_threads_share_a_buffer_across_four_streams,
    streams::rule_20_a_failed_event_leaves_no_wrong_answer,
    streams::a_claimed_input_is_reported_before_a_failed_wait,
    lifetimes::rule_20_a_graph_over_a_dropped_buffer_stays_ordered,
    lifetimes::a_claim_on_a_dropped_buffer_stays_while_a_graph_reads_it,
    lifetimes::rule_20_random_programs_across_streams_match_a_model,
    imports::imported_memory_is_launched_on_viewed_and_let_go,
    imports::hazards_on_imported_memory_order_a_graph,
    imports::a_graph_keeps_imported_memory_after_its_buffer_drops,
    imports::imported_memory_is_ordered_across_streams_and_let_go_after_the_last_sync,
    imports::a_doomed_window_claims_imported_memory_until_rewritten,
    imports::bad_imports_are_refused_with_the_page_handed_back,
];
