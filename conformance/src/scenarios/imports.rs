//! Memory made outside the library, imported: tracked like the stream's own
//! buffers in every role (launches, views, hazards inside a graph, claims,
//! other streams), never cut or freed by the pools, and let go of, its
//! keep-alive dropped, only once the device is past its last use.
//!
//! Each scenario passes with nothing checked on a backend whose run makes
//! no foreign memory ([`UserKernels::foreign_page`] is `None`).

use std::sync::Arc;

use graph_capture::{Buffer, Builtin, Client, Error, StreamId};

use super::streams::Busy;
use crate::ensure;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, expect, expect_all, expect_claimed, refused};
use crate::workload::UserKernels;

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `values` in foreign memory, imported on `stream`, with the keep-alive
/// the page holds; `None` where the backend's run makes no foreign memory.
fn import<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    values: &[f32],
) -> Result<Option<(Buffer, Arc<()>)>, String> {
    let kept = Arc::new(());
    let Some(page) = D::foreign_page(client.device(), &f32_bytes(values), kept.clone()) else {
        return Ok(None);
    };
    let page = page.step("foreign memory")?;
    let buffer = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .step("import")?;
    Ok(Some((buffer, kept)))
}

/// Whether the keep-alive is still held by the library.
fn held(kept: &Arc<()>) -> bool {
    Arc::strong_count(kept) > 1
}

fn imported_bytes<D: UserKernels>(client: &Client<D>, stream: StreamId) -> Result<u64, String> {
    Ok(client.usage(stream).step("usage")?.device.imported_bytes)
}

/// An imported buffer is read, launched on and viewed like any, counted
/// apart from the pools, and let go of once dropped and synced.
pub fn imported_memory_is_launched_on_viewed_and_let_go<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let Some((x, kept)) = import(&client, stream, &[2.0; NU])? else {
        return Ok(());
    };
    ensure!(x.len() == (NU * 4) as u64, "{} bytes imported", x.len());
    expect_all(&client, &x, 2.0, "the foreign bytes")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    client
        .run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        .step("add into imported memory")?;
    expect_all(&client, &x, 3.0, "after the add")?;
    let tail = x.range(256, 4).step("a view")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&tail], 1, 9.0)
        .step("fill the view")?;
    let mut want = vec![3.0; NU];
    want[64] = 9.0;
    expect(&client, &x, &want, "the view's own element")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.device.imported_bytes == (NU * 4) as u64,
        "{} bytes counted as imported",
        usage.device.imported_bytes
    );
    let pages = usage.device.pages;
    drop((x, tail));
    client.sync(stream).step("sync")?;
    ensure!(imported_bytes(&client, stream)? == 0, "not let go");
    ensure!(!held(&kept), "the keep-alive outlived the buffer");
    ensure!(
        client.usage(stream).step("usage")?.device.pages == pages,
        "the pools' pages changed"
    );
    Ok(())
}

/// Inside one graph, launches read and write imported memory in every
/// order (read after write, write after read, write after write), and
/// every replay gives the eager answer.
pub fn hazards_on_imported_memory_order_a_graph<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let Some((x, _kept)) = import(&client, stream, &[0.0; NU])? else {
        return Ok(());
    };
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    let y = client.create_f32(stream, &[0.0; NU]).step("y")?;
    let z = client.create_f32(stream, &[0.0; NU]).step("z")?;
    let step = |round: f32| -> Result<(), Error> {
        // x = 2r; y = x; x += 1; z = x; x = 5r
        client.run_builtin(stream, Builtin::Fill, &[&x], N, 2.0 * round)?;
        client.run_builtin(stream, Builtin::Copy, &[&x, &y], N, 0.0)?;
        client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)?;
        client.run_builtin(stream, Builtin::Copy, &[&x, &z], N, 0.0)?;
        client.run_builtin(stream, Builtin::Fill, &[&x], N, 5.0)
    };
    let (graph, ()) = client.capture(stream, |_| step(3.0)).step("capture")?;
    for replay in 0..8 {
        client.write_f32(&x, &[-1.0; NU]).step("stale bytes")?;
        graph.replay().step(&format!("replay {replay}"))?;
        expect_all(&client, &y, 6.0, "read after write")?;
        expect_all(&client, &z, 7.0, "write after read, then read")?;
        expect_all(&client, &x, 5.0, "write after write")?;
    }
    Ok(())
}

/// A graph keeps imported memory, and its keep-alive, after the user drops
/// the buffer, until the graph goes and the device is past its replays.
pub fn a_graph_keeps_imported_memory_after_its_buffer_drops<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let Some((x, kept)) = import(&client, stream, &[0.0; NU])? else {
        return Ok(());
    };
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    let out = client.create_f32(stream, &[0.0; NU]).step("out")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)?;
            client.run_builtin(stream, Builtin::Copy, &[&x, &out], N, 0.0)
        })
        .step("capture over imported memory")?;
    drop(x);
    for replay in 0..10 {
        graph.replay().step(&format!("replay {replay}"))?;
    }
    expect_all(&client, &out, 11.0, "the warmup and ten replays")?;
    ensure!(
        held(&kept),
        "the keep-alive went while a graph holds the memory"
    );
    ensure!(
        imported_bytes(&client, stream)? == (NU * 4) as u64,
        "pinned memory no longer counted"
    );
    drop(graph);
    client.sync(stream).step("sync")?;
    ensure!(!held(&kept), "the keep-alive outlived the graph");
    ensure!(imported_bytes(&client, stream)? == 0, "not let go");
    Ok(())
}

/// Imported memory another stream reads is ordered after its own stream's
/// work, and kept while both streams' launches on it are queued. Its
/// keep-alive goes at the sync of the last stream that used it, whichever
/// stream that is (the owner first, the other first, or the other
/// destroyed), with no second sync of the owner.
pub fn imported_memory_is_ordered_across_streams_and_let_go_after_the_last_sync<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    for last in [
        "the other stream",
        "the owner",
        "the other stream destroyed",
    ] {
        let p = client.create_stream().step("p")?;
        let g = client.create_stream().step("g")?;
        let Some((x, kept)) = import(&client, p, &[1.0; NU])? else {
            return Ok(());
        };
        let busy = Busy::on(session, &client, p)?;
        let ones = client.create_f32(p, &[1.0; NU]).step("ones")?;
        let out = client.create_f32(g, &[0.0; NU]).step("out")?;
        for round in 0..4 {
            busy.run(&client, p).step("busy p")?;
            client
                .run_builtin(p, Builtin::Add, &[&x, &ones], N, 0.0)
                .step(&format!("p adds {round}"))?;
        }
        client
            .run_builtin(g, Builtin::Copy, &[&x, &out], N, 0.0)
            .step("g copies after p's adds")?;
        // Dropped while both streams' work on it may still be queued.
        drop(x);
        match last {
            "the owner" => {
                client.sync(g).step("sync g")?;
                client.sync(p).step("sync p")?;
            }
            "the other stream" => {
                client.sync(p).step("sync p")?;
                client.sync(g).step("sync g")?;
            }
            _ => {
                client.sync(p).step("sync p")?;
                client.destroy_stream(g).step("destroy g")?;
            }
        }
        ensure!(
            !held(&kept),
            "the keep-alive outlived every use, {last} synced last"
        );
        ensure!(imported_bytes(&client, p)? == 0, "not let go");
        if last != "the other stream destroyed" {
            expect_all(&client, &out, 5.0, "g's copy after p's four adds")?;
            client.destroy_stream(g).step("destroy g")?;
        }
        drop((busy, ones, out));
        client.destroy_stream(p).step("destroy p")?;
    }
    Ok(())
}

/// A doomed window claims the imported memory it would have written, until
/// a write renews it.
pub fn a_doomed_window_claims_imported_memory_until_rewritten<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let Some((x, _kept)) = import(&client, stream, &[0.0; NU])? else {
        return Ok(());
    };
    let window = client.prepare(stream).step("prepare")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 4.0)
        .step("warmup")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 4.0)
        .step("recorded")?;
    refused(client.read(&x), "a read while recording")?;
    refused(client.instantiate(stream, window), "the doomed window")?;
    expect_claimed(
        &client,
        &x,
        "host syncs are refused",
        "claimed by the doomed window",
    )?;
    client.write_f32(&x, &[6.0; NU]).step("rewrite")?;
    expect_all(&client, &x, 6.0, "renewed")
}

/// Bad imports are refused with the page handed back, and change nothing:
/// a page the pools made, a page of another device, an unknown stream, a
/// recording stream (whose window the refusal dooms, on the recording
/// thread), another thread's import while a window records (which dooms
/// nothing). The page then imports.
pub fn bad_imports_are_refused_with_the_page_handed_back<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let kept = Arc::new(());
    let Some(page) = D::foreign_page(client.device(), &f32_bytes(&[7.0; NU]), kept.clone()) else {
        return Ok(());
    };
    let page = page.step("foreign memory")?;
    // A page the pools made.
    let mut raw = D::create_stream(client.device()).step("a raw stream")?;
    let own = D::allocate_device_page(&mut raw, 256).step("a page")?;
    let (err, own) = refused(client.import(stream, own), "a page the pools made")?.into_parts();
    ensure!(matches!(err, Error::NotImported { .. }), "{err}");
    D::release_device_page(&mut raw, own);
    drop(raw);
    // A page of another device.
    let other = D::open().step("another device")?;
    let kept_other = Arc::new(());
    if let Some(foreign) = D::foreign_page(&other, &[1; 16], kept_other.clone()) {
        let foreign = foreign.step("another device's foreign memory")?;
        let (err, foreign) =
            refused(client.import(stream, foreign), "another device's page")?.into_parts();
        ensure!(
            matches!(err, Error::OtherDevice { what: "page", .. }),
            "{err}"
        );
        drop(foreign);
        ensure!(!held(&kept_other), "the refused page kept its keep-alive");
    }
    let raw = D::create_stream(&other).step("a stream of another device")?;
    let err = refused(client.adopt_stream(raw), "another device's stream")?;
    ensure!(
        matches!(err, Error::OtherDevice { what: "stream", .. }),
        "{err}"
    );
    drop(other);
    // An unknown stream.
    let gone = client.create_stream().step("another stream")?;
    client.destroy_stream(gone).step("destroy")?;
    let (err, page) = refused(client.import(gone, page), "an unknown stream")?.into_parts();
    ensure!(matches!(err, Error::UnknownStream(_)), "{err}");
    // Another thread, while a window records: refused, and the window seals.
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    let acc = client.create_f32(stream, &[0.0; NU]).step("acc")?;
    let window = client.prepare(stream).step("prepare")?;
    client
        .run_builtin(stream, Builtin::Add, &[&acc, &one], N, 0.0)
        .step("warmup")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Add, &[&acc, &one], N, 0.0)
        .step("recorded")?;
    let imported = std::thread::scope(|scope| {
        scope
            .spawn(|| client.import(stream, page))
            .join()
            .map_err(|_| "the importing thread panicked".to_owned())
    })?;
    let (err, page) = refused(imported, "another thread's import")?.into_parts();
    ensure!(matches!(err, Error::NotRecorder { .. }), "{err}");
    let graph = client
        .instantiate(stream, window)
        .step("another thread's refusal dooms nothing")?;
    graph.replay().step("replay")?;
    expect_all(&client, &acc, 2.0, "the warmup and the replay")?;
    // The recording thread's own import dooms its window.
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    let (err, page) = refused(client.import(stream, page), "while recording")?.into_parts();
    ensure!(matches!(err, Error::OutOfOrder { .. }), "{err}");
    refused(
        client.instantiate(stream, window),
        "a window its own thread's refused call doomed",
    )?;
    // Every refusal changed nothing: the page imports now.
    ensure!(held(&kept), "a refusal dropped the keep-alive");
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .step("imported")?;
    expect_all(&client, &x, 7.0, "the foreign bytes")?;
    ensure!(
        imported_bytes(&client, stream)? == (NU * 4) as u64,
        "counted once"
    );
    Ok(())
}
