//! The side-by-side chain on the host backend: its figures, its outputs
//! checked against the kernels run, and a launch its buffers cannot hold
//! refused before it reaches the device.

use benches::chain::{Chain, Row, expected_outputs, rows};
use graph_capture::host::Host;
use graph_capture::{Client, Error};

#[test]
fn a_row_counts_every_kernel_in_its_outputs() {
    let chain = Chain::<Host>::open().expect("the host backend");
    for row in rows::short().into_iter().chain([Row {
        elems: 300,
        kernels: 7,
        rounds: 4,
        control: false,
    }]) {
        let figures = chain.run(&row).expect("the row runs");
        assert_eq!(figures.outputs, expected_outputs(&row), "{}", row.name());
        for value in [
            figures.eager_us_per_kernel,
            figures.replay_us_per_kernel,
            figures.issue_us_per_eager,
            figures.issue_us_per_replay,
            figures.capture_us,
        ] {
            assert!(value > 0.0, "{figures:?}");
        }
        let json = figures.json("ours/host", &row);
        assert_eq!(json["row"], row.name());
        assert_eq!(json["kernels"], row.kernels);
        assert_eq!(json["peer"], "ours/host");
    }
}

#[test]
fn the_expected_outputs_follow_the_ping_pong() {
    let odd = Row {
        elems: 4,
        kernels: 3,
        rounds: 2,
        control: false,
    };
    // Five passes (a warmup, then two rounds of an eager pass and a replay).
    // An odd pass starts again from the first buffer, so each pass only
    // adds two to it; an even one carries the count through.
    assert_eq!(expected_outputs(&odd), [10.0, 11.0]);
    let even = Row { kernels: 4, ..odd };
    assert_eq!(expected_outputs(&even), [20.0, 19.0]);
}

#[test]
fn an_add_one_its_buffers_cannot_hold_is_refused() {
    let client = Client::<Host>::open().expect("the host backend");
    let stream = client.create_stream().expect("a stream");
    let chain = Chain::on(client.clone()).expect("the kernel");
    let small = client.create_f32(stream, &[0.0; 8]).expect("a buffer");
    let large = client.create_f32(stream, &[0.0; 64]).expect("a buffer");
    for (src, dst) in [(&small, &large), (&large, &small)] {
        match chain.add_one(src, dst, 64) {
            Err(Error::BadLaunch(why)) => assert!(why.contains("256 bytes"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    chain.add_one(&small, &large, 8).expect("eight fit");
    let values = client.read_f32(&large).expect("a read");
    assert_eq!(values[..8], [1.0; 8]);
    assert!(values[8..].iter().all(|&v| v == 0.0), "{values:?}");
}
