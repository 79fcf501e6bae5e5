//! The room a window keeps for info its recording may meet first goes back
//! when the window closes: the pages taken for it are released, and a page
//! the pool already held is kept (rule 22's "room costs no memory past the
//! window", from both sides).

use backend_host::Host;
use capture_core::{Builtin, Client, Config};

#[test]
fn a_window_releases_only_the_pages_it_took_for_room() {
    // One slice per page, so that which page the room takes is clear.
    let client = Client::<Host>::open_with(Config {
        first_page_bytes: 256,
        device_page_bytes: 256,
        host_page_bytes: 256,
        ..Config::default()
    })
    .expect("host");
    let s = client.create_stream().expect("s");
    let y = client.create_f32(s, &[0.0; 64]).expect("y");
    // Two free device pages the pool keeps: one for the warmup's info, one
    // for the room.
    let spares = [
        client.allocate(s, 256).expect("spare"),
        client.allocate(s, 256).expect("spare"),
    ];
    drop(spares);
    // And two free host pages: two writes' staging slices at once.
    client.write_f32(&y, &[0.0; 64]).expect("write");
    client.write_f32(&y, &[0.0; 64]).expect("write");
    client.sync(s).expect("sync");
    let pages = || {
        let usage = client.usage(s).expect("usage");
        (usage.device.pages, usage.host.pages)
    };
    let before = pages();
    let (graph, ()) = client
        .capture(s, |_| client.run_builtin(s, Builtin::Fill, &[&y], 64, 2.0))
        .expect("capture");
    client.sync(s).expect("sync");
    let after = pages();
    assert_eq!(
        after, before,
        "the window kept room in pages the pool held already (device, host): none is \
         released"
    );
    graph.replay().expect("replay");
    assert_eq!(client.read_f32(&y).expect("y"), vec![2.0; 64]);
}
