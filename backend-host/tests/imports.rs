//! The core's size checks on imported memory, which only the host backend
//! can hand it an empty page to show; every other role of imported memory
//! is a conformance scenario (`scenarios/imports.rs`), run on every backend.

use backend_host::{DevicePage, Host};
use capture_core::{Client, Config, Error};

#[test]
fn empty_and_oversized_imports_are_refused_with_the_page_handed_back() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let empty = DevicePage::import(client.device(), &[], ()).expect("an empty page");
    let (err, _) = client
        .import(stream, empty)
        .expect_err("empty")
        .into_parts();
    assert_eq!(err, Error::EmptyBuffer);
    // The allocation limit holds for imports as for the pools.
    let small = Client::<Host>::with_device(
        client.device().clone(),
        Config {
            max_allocation_bytes: 64,
            ..Config::default()
        },
    );
    let on_small = small.create_stream().expect("stream");
    let at_limit = DevicePage::import(small.device(), &[1; 64], ()).expect("a page");
    small
        .import(on_small, at_limit)
        .map_err(|rejected| rejected.error)
        .expect("the limit itself imports");
    let past = DevicePage::import(small.device(), &[2; 65], ()).expect("a page");
    let (err, past) = small
        .import(on_small, past)
        .expect_err("past the limit")
        .into_parts();
    assert!(
        matches!(
            err,
            Error::TooLarge {
                requested: 65,
                limit: 64
            }
        ),
        "{err}"
    );
    let x = client
        .import(stream, past)
        .map_err(|rejected| rejected.error)
        .expect("the page handed back imports where the limit allows");
    assert_eq!(client.read(&x).expect("read"), vec![2; 65]);
}
