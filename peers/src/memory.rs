//! Memory side by side: four graphs, one per batch size, each allocating
//! and dropping its scratch, captured largest first; then what each
//! runtime's device memory holds.

use cubecl_core::prelude::*;
use graph_capture::StreamId;

use crate::ours::Ours;
use crate::theirs::{Theirs, launch_one};

/// Elements per unit of batch.
const BASE: usize = 64 << 10;
/// The batch sizes, largest first, as a runtime warming its graphs does.
const BATCHES: [usize; 4] = [8, 4, 2, 1];

/// Bytes each side holds once its four graphs are captured and its pools
/// cleaned up: (ours, cubecl's), and the bytes of the inputs and outputs
/// both hold alike.
pub fn compare(ours: &Ours, theirs: &Theirs) -> Result<(u64, u64, u64), String> {
    let kept_alike = BATCHES.iter().map(|b| 2 * b * BASE * 4).sum::<usize>() as u64;
    Ok((ours_holds(ours)?, theirs_holds(theirs)?, kept_alike))
}

fn ours_holds(ours: &Ours) -> Result<u64, String> {
    let err = |e: graph_capture::Error| e.to_string();
    let client = ours.client();
    // A stream of its own, so the rows' buffers are not counted.
    let stream: StreamId = client.create_stream().map_err(err)?;
    let mut graphs = Vec::new();
    let mut buffers = Vec::new();
    for batch in BATCHES {
        let elems = batch * BASE;
        let input = client.create_f32(stream, &vec![1.0; elems]).map_err(err)?;
        let output = client.allocate(stream, (elems * 4) as u64).map_err(err)?;
        let (graph, ()) = client
            .capture(stream, |_| {
                let scratch = client.allocate(stream, (elems * 4) as u64)?;
                ours.launch_one(stream, &input, &scratch, elems)?;
                ours.launch_one(stream, &scratch, &output, elems)
            })
            .map_err(err)?;
        graph.replay().map_err(err)?;
        graphs.push(graph);
        buffers.push((input, output));
    }
    client.sync(stream).map_err(err)?;
    client.trim(stream).map_err(err)?;
    let held = client.usage(stream).map_err(err)?.device.reserved_bytes;
    drop(graphs);
    drop(buffers);
    client.destroy_stream(stream).map_err(err)?;
    Ok(held)
}

fn theirs_holds(theirs: &Theirs) -> Result<u64, String> {
    let client = theirs.client();
    client.memory_cleanup().map_err(|e| format!("{e:?}"))?;
    let before = theirs.reserved_bytes();
    let mut graphs = Vec::new();
    let mut buffers = Vec::new();
    for batch in BATCHES {
        let elems = batch * BASE;
        let input = client.create_from_slice(f32::as_bytes(&vec![1.0f32; elems]));
        let output = client.empty(elems * 4);
        let body = || {
            let scratch = client.empty(elems * 4);
            launch_one(client, &input, &scratch, elems);
            launch_one(client, &scratch, &output, elems);
        };
        client.graph_prepare().map_err(|e| format!("{e:?}"))?;
        body();
        client
            .read_one(output.clone())
            .map_err(|e| format!("{e:?}"))?;
        client.start_capture().map_err(|e| format!("{e:?}"))?;
        body();
        let graph = client.stop_capture().map_err(|e| format!("{e:?}"))?;
        // SAFETY: the input and output live until the graphs are dropped
        // below, and only this client's stream uses them.
        unsafe { graph.replay() }.map_err(|e| format!("{e:?}"))?;
        graphs.push(graph);
        buffers.push((input, output));
    }
    client
        .read_one(buffers[0].1.clone())
        .map_err(|e| format!("{e:?}"))?;
    client.memory_cleanup().map_err(|e| format!("{e:?}"))?;
    let held = theirs.reserved_bytes().saturating_sub(before);
    drop(graphs);
    drop(buffers);
    Ok(held)
}
