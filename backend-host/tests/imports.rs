//! Memory made elsewhere, imported: tracked like the stream's own buffers
//! (hazards, views, claims, graphs, other streams), never cut or freed by
//! the pools, and let go once nothing can touch it.

use backend_host::{DevicePage, Host};
use capture_core::{Buffer, Builtin, Client, Driver, Error, StreamId};

const N: usize = 128;

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn import(client: &Client<Host>, stream: StreamId, values: &[f32]) -> Buffer {
    let page = DevicePage::import(client.device(), &f32_bytes(values), ()).expect("host memory");
    client
        .import(stream, page)
        .map_err(|(err, _)| err)
        .expect("an imported page")
}

fn imported_bytes(client: &Client<Host>, stream: StreamId) -> u64 {
    client.usage(stream).expect("usage").device.imported_bytes
}

#[test]
fn an_imported_buffer_is_read_and_launched_on_like_any() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let x = import(&client, stream, &[2.0; N]);
    assert_eq!(x.len(), (N * 4) as u64);
    assert_eq!(client.read_f32(&x).expect("read"), vec![2.0; N]);
    let one = client.create_f32(stream, &[1.0; N]).expect("one");
    client
        .run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)
        .expect("add into imported memory");
    assert_eq!(client.read_f32(&x).expect("read"), vec![3.0; N]);
    // A view of it reads its own bytes.
    let tail = x.range(256, 4).expect("a view");
    client
        .run_builtin(stream, Builtin::Fill, &[&tail], 1, 9.0)
        .expect("fill a view");
    let mut want = vec![3.0; N];
    want[64] = 9.0;
    assert_eq!(client.read_f32(&x).expect("read"), want);
    let usage = client.usage(stream).expect("usage");
    assert_eq!(usage.device.imported_bytes, (N * 4) as u64);
    // Not the pool's: the pages it obtained are its own alone.
    let pages = usage.device.pages;
    drop((x, tail));
    client.sync(stream).expect("sync");
    assert_eq!(imported_bytes(&client, stream), 0, "let go");
    assert_eq!(client.usage(stream).expect("usage").device.pages, pages);
}

#[test]
fn a_graph_keeps_imported_memory_after_the_buffer_is_dropped() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let x = import(&client, stream, &[0.0; N]);
    let one = client.create_f32(stream, &[1.0; N]).expect("one");
    let out = client.create_f32(stream, &[0.0; N]).expect("out");
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)?;
            client.run_builtin(stream, Builtin::Copy, &[&x, &out], N as u32, 0.0)
        })
        .expect("capture over imported memory");
    drop(x);
    for _ in 0..10 {
        graph.replay().expect("replay");
    }
    client.sync(stream).expect("sync");
    assert_eq!(client.read_f32(&out).expect("read"), vec![11.0; N]);
    assert_eq!(imported_bytes(&client, stream), (N * 4) as u64, "pinned");
    drop(graph);
    client.sync(stream).expect("sync");
    assert_eq!(imported_bytes(&client, stream), 0, "let go with the graph");
}

#[test]
fn imported_memory_is_ordered_across_streams_and_kept_while_a_launch_is_queued() {
    let client = Client::<Host>::open().expect("host");
    let p = client.create_stream().expect("p");
    let g = client.create_stream().expect("g");
    let big = 1 << 20;
    let x = import(&client, p, &vec![1.0; big]);
    let ones = client.create_f32(p, &vec![1.0; big]).expect("ones");
    let out = client.create_f32(g, &vec![0.0; big]).expect("out");
    for _ in 0..4 {
        client
            .run_builtin(p, Builtin::Add, &[&x, &ones], big as u32, 0.0)
            .expect("p adds");
    }
    client
        .run_builtin(g, Builtin::Copy, &[&x, &out], big as u32, 0.0)
        .expect("g copies after p's adds");
    // Dropped while both streams' work on it may still be queued.
    drop(x);
    assert_eq!(client.read_f32(&out).expect("read"), vec![5.0; big]);
    client.sync(p).expect("sync p");
    client.sync(g).expect("sync g");
    client.sync(p).expect("sync p again, past g's queued use");
    assert_eq!(imported_bytes(&client, p), 0);
}

#[test]
fn a_failed_write_claims_imported_memory_until_rewritten() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let x = import(&client, stream, &[0.0; N]);
    let err = client
        .write_f32(&x, &[1.0; N + 1])
        .expect_err("a write of the wrong size");
    assert!(matches!(err, Error::SizeMismatch { .. }), "{err}");
    // A doomed window claims what it would have written.
    let window = client.prepare(stream).expect("prepare");
    client.begin(stream, window).expect("begin");
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N as u32, 4.0)
        .expect("recorded");
    assert!(client.read(&x).is_err(), "a read while recording dooms it");
    assert!(client.instantiate(stream, window).is_err());
    assert!(
        matches!(client.read(&x), Err(Error::Claimed { .. })),
        "claimed by the doomed window"
    );
    client.write_f32(&x, &[6.0; N]).expect("rewrite");
    assert_eq!(client.read_f32(&x).expect("read"), vec![6.0; N]);
}

#[test]
fn bad_imports_are_refused_with_the_page_handed_back() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    // A page the backend did not make from imported memory.
    let mut raw = Host::create_stream(client.device()).expect("a raw stream");
    let own = Host::allocate_device_page(&mut raw, 256).expect("a page");
    let (err, own) = client.import(stream, own).expect_err("not imported");
    assert!(
        matches!(err, Error::NotImported { backend: "host" }),
        "{err}"
    );
    Host::release_device_page(&mut raw, own);
    // Empty memory.
    let empty = DevicePage::import(client.device(), &[], ()).expect("an empty page");
    let (err, _) = client.import(stream, empty).expect_err("empty");
    assert_eq!(err, Error::EmptyBuffer);
    // Past the allocation limit, which holds for imports as for the pools.
    let small = Client::<Host>::with_device(
        client.device().clone(),
        capture_core::Config {
            max_allocation_bytes: 64,
            ..capture_core::Config::default()
        },
    );
    let on_small = small.create_stream().expect("stream");
    let at_limit = DevicePage::import(client.device(), &[1; 64], ()).expect("a page");
    small
        .import(on_small, at_limit)
        .map_err(|(err, _)| err)
        .expect("the limit itself imports");
    let past = DevicePage::import(client.device(), &[1; 65], ()).expect("a page");
    let (err, _) = small.import(on_small, past).expect_err("past the limit");
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
    // An unknown stream.
    let page = DevicePage::import(client.device(), &[7; 16], ()).expect("a page");
    let gone = client.create_stream().expect("another");
    client.destroy_stream(gone).expect("destroy");
    let (err, page) = client.import(gone, page).expect_err("unknown stream");
    assert!(matches!(err, Error::UnknownStream(_)), "{err}");
    // While the stream records: a recording takes no new memory.
    let window = client.prepare(stream).expect("prepare");
    client.begin(stream, window).expect("begin");
    let (err, page) = client.import(stream, page).expect_err("recording");
    assert!(matches!(err, Error::OutOfOrder { .. }), "{err}");
    assert!(
        client.instantiate(stream, window).is_err(),
        "the recording thread's refused call dooms its window"
    );
    // Each refusal changed nothing: the page imports now.
    let x = client
        .import(stream, page)
        .map_err(|(err, _)| err)
        .expect("imported");
    assert_eq!(client.read(&x).expect("read"), vec![7; 16]);
    assert_eq!(imported_bytes(&client, stream), 16);
}

#[test]
fn another_threads_import_on_a_recording_stream_is_refused_and_leaves_the_window_whole() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let x = client.create_f32(stream, &[1.0; N]).expect("x");
    let one = client.create_f32(stream, &[1.0; N]).expect("one");
    let window = client.prepare(stream).expect("prepare");
    client
        .run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)
        .expect("warmup");
    client.begin(stream, window).expect("begin");
    client
        .run_builtin(stream, Builtin::Add, &[&x, &one], N as u32, 0.0)
        .expect("recorded");
    let other = client.clone();
    let (err, page) = std::thread::spawn(move || {
        let page = DevicePage::import(other.device(), &[5; 16], ()).expect("a page");
        other
            .import(stream, page)
            .expect_err("another thread's import")
    })
    .join()
    .expect("the importing thread");
    assert!(matches!(err, Error::NotRecorder { .. }), "{err}");
    let graph = client
        .instantiate(stream, window)
        .expect("the owner's window seals: another thread's refusal dooms nothing");
    graph.replay().expect("replay");
    assert_eq!(
        client.read_f32(&x).expect("read"),
        vec![3.0; N],
        "the warmup and the replay; recording runs nothing"
    );
    let imported = client
        .import(stream, page)
        .map_err(|(err, _)| err)
        .expect("the page handed back imports");
    assert_eq!(client.read(&imported).expect("read"), vec![5; 16]);
}

#[test]
fn memory_and_streams_of_another_device_are_refused_and_handed_back() {
    let client = Client::<Host>::open().expect("host");
    let other = Client::<Host>::open().expect("another host device");
    let stream = client.create_stream().expect("stream");
    let page = DevicePage::import(other.device(), &[3; 16], ()).expect("a page");
    let (err, page) = client
        .import(stream, page)
        .expect_err("another device's page");
    assert!(
        matches!(err, Error::OtherDevice { what: "page", .. }),
        "{err}"
    );
    assert_eq!(imported_bytes(&client, stream), 0, "nothing changed");
    let on_other = other.create_stream().expect("a stream of the other");
    let x = other
        .import(on_other, page)
        .map_err(|(err, _)| err)
        .expect("its own device imports it");
    assert_eq!(other.read(&x).expect("read"), vec![3; 16]);

    let raw = Host::create_stream(other.device()).expect("a raw stream");
    let err = client
        .adopt_stream(raw)
        .expect_err("another device's stream");
    assert!(
        matches!(err, Error::OtherDevice { what: "stream", .. }),
        "{err}"
    );
    let raw = Host::create_stream(client.device()).expect("a raw stream");
    let adopted = client.adopt_stream(raw).expect("its own device's stream");
    let y = client.create(adopted, &[4; 16]).expect("a buffer on it");
    assert_eq!(client.read(&y).expect("read"), vec![4; 16]);
    client.destroy_stream(adopted).expect("destroyed like any");
}

#[test]
fn the_keep_alive_is_dropped_only_once_the_device_is_past_the_last_use() {
    let client = Client::<Host>::open().expect("host");
    let stream = client.create_stream().expect("stream");
    let kept = std::sync::Arc::new(());
    let big = 1 << 20;
    let page = DevicePage::import(client.device(), &f32_bytes(&vec![1.0; big]), kept.clone())
        .expect("a page");
    let x = client
        .import(stream, page)
        .map_err(|(err, _)| err)
        .expect("imported");
    let ones = client.create_f32(stream, &vec![1.0; big]).expect("ones");
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &ones], big as u32, 0.0)
        })
        .expect("capture");
    for _ in 0..8 {
        client
            .run_builtin(stream, Builtin::Add, &[&x, &ones], big as u32, 0.0)
            .expect("queued");
    }
    drop(x);
    assert_eq!(
        std::sync::Arc::strong_count(&kept),
        2,
        "queued launches and the graph still use it"
    );
    graph.replay().expect("replay");
    drop(graph);
    client.sync(stream).expect("sync");
    assert_eq!(std::sync::Arc::strong_count(&kept), 1, "dropped at last");
}
