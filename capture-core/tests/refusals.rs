//! Every call of `Client` the recording thread makes inside a window, at the
//! window's top level and inside a conditional's body: a refused call dooms
//! the window, whatever refused it (rule 23); capture calls out of order,
//! queries, calls that name no stream of this client and another thread's
//! calls change nothing, and the window seals.

use backend_host::{DevicePage, Host, Kernel as HostKernel};
use capture_core::{
    Access, Buffer, Builtin, Client, Error, GraphHandle, Kernel, Signature, StreamId, WindowId,
};

const N: u32 = 16;

/// A recording stream `s` with a flag (clear), buffers of its own, another
/// stream, a graph of `s`, and another client.
struct Fx {
    client: Client<Host>,
    s: StreamId,
    t: StreamId,
    flag: Buffer,
    x: Buffer,
    one: Buffer,
    graph: GraphHandle<Host>,
    one_binding: Kernel<Host>,
    other: Client<Host>,
    theirs: Buffer,
}

impl Fx {
    fn new() -> Self {
        let client = Client::<Host>::open().expect("host");
        let s = client.create_stream().expect("s");
        let t = client.create_stream().expect("t");
        let x = client.create_f32(s, &[0.0; N as usize]).expect("x");
        let one = client.create_f32(s, &[1.0; N as usize]).expect("one");
        let (graph, ()) = client
            .capture(s, |_| {
                client.run_builtin(s, Builtin::Add, &[&x, &one], N, 0.0)
            })
            .expect("a graph of s");
        let one_binding = Kernel::new(
            HostKernel::new(Signature::new("one").bindings(&[Access::Write]), |_, _| {
                Ok(())
            })
            .expect("kernel"),
        );
        let other = Client::<Host>::open().expect("another client");
        let theirs_stream = other.create_stream().expect("their stream");
        let theirs = other.create(theirs_stream, &[0; 4]).expect("theirs");
        Self {
            flag: client.create(s, &0u32.to_le_bytes()).expect("flag"),
            client,
            s,
            t,
            x,
            one,
            graph,
            one_binding,
            other,
            theirs,
        }
    }

    fn add(&self) -> Result<(), Error> {
        self.client
            .run_builtin(self.s, Builtin::Add, &[&self.x, &self.one], N, 0.0)
    }

    /// A window on `s` recording one add, then `call` made by the recording
    /// thread at its top level or inside an `if` body (whose own result is
    /// fine whatever the call's), then the close.
    fn window_with(
        &self,
        in_body: bool,
        call: &dyn Fn(&Fx, WindowId) -> Result<(), Error>,
    ) -> (Result<(), Error>, Result<GraphHandle<Host>, Error>) {
        let c = &self.client;
        // A doomed window before claimed what it wrote; a whole write clears it.
        c.write_f32(&self.x, &[0.0; N as usize]).expect("reset");
        let window = c.prepare(self.s).expect("prepare");
        self.add().expect("warmup");
        c.begin(self.s, window).expect("begin");
        self.add().expect("recorded");
        let mut result = Ok(());
        if in_body {
            c.if_flag(self.s, &self.flag, || {
                result = call(self, window);
                Ok(())
            })
            .expect("the body itself is fine");
        } else {
            result = call(self, window);
        }
        (result, c.instantiate(self.s, window))
    }
}

type Call = Box<dyn Fn(&Fx, WindowId) -> Result<(), Error>>;

fn call(f: impl Fn(&Fx, WindowId) -> Result<(), Error> + 'static) -> Call {
    Box::new(f)
}

/// A call the recording stream refuses: what it is, the call, and whether
/// an error is its refusal.
type Refused = (&'static str, Call, fn(&Error) -> bool);

/// Calls the recording stream refuses, each with what its refusal is.
fn refused_calls() -> Vec<Refused> {
    vec![
        (
            "allocate nothing",
            call(|f, _| f.client.allocate(f.s, 0).map(drop)),
            |e| matches!(e, Error::EmptyBuffer),
        ),
        (
            "import while recording",
            call(|f, _| {
                let page = DevicePage::import(f.client.device(), &[1; 8], ()).expect("a page");
                f.client.import(f.s, page).map(drop).map_err(Error::from)
            }),
            |e| matches!(e, Error::OutOfOrder { call: "import", .. }),
        ),
        (
            "create nothing",
            call(|f, _| f.client.create(f.s, &[]).map(drop)),
            |e| matches!(e, Error::EmptyBuffer),
        ),
        (
            "create_f32 of nothing",
            call(|f, _| f.client.create_f32(f.s, &[]).map(drop)),
            |e| matches!(e, Error::EmptyBuffer),
        ),
        (
            "write the wrong size",
            call(|f, _| f.client.write(&f.x, &[0; 3])),
            |e| matches!(e, Error::SizeMismatch { .. }),
        ),
        (
            "write_f32 the wrong size",
            call(|f, _| f.client.write_f32(&f.x, &[0.0])),
            |e| matches!(e, Error::SizeMismatch { .. }),
        ),
        ("read", call(|f, _| f.client.read(&f.x).map(drop)), |e| {
            matches!(e, Error::SyncWhileRecording(_))
        }),
        (
            "read_f32 of a view of three bytes",
            call(|f, _| {
                let view = f.x.range(0, 3).expect("a view");
                f.client.read_f32(&view).map(drop)
            }),
            |e| matches!(e, Error::NotWhole { .. }),
        ),
        ("sync", call(|f, _| f.client.sync(f.s)), |e| {
            matches!(e, Error::SyncWhileRecording(_))
        }),
        (
            "wait for a stream outside the window",
            call(|f, _| f.client.wait(f.s, f.t)),
            |e| matches!(e, Error::WaitOutsideWindow { .. } | Error::InBody { .. }),
        ),
        (
            "another stream waits for the recording one, or syncs once joined",
            call(|f, _| {
                // At the top level this is a fork, no refusal: the call
                // refused is the joined stream's sync, which dooms the
                // window it joined.
                f.client.wait(f.t, f.s)?;
                let synced = f.client.sync(f.t);
                f.client.wait(f.s, f.t)?;
                synced
            }),
            |e| {
                matches!(
                    e,
                    Error::InBody { .. } | Error::SyncWhileRecording(_) | Error::OutOfOrder { .. }
                )
            },
        ),
        ("trim", call(|f, _| f.client.trim(f.s).map(drop)), |e| {
            matches!(e, Error::SyncWhileRecording(_))
        }),
        (
            "launch that does not match its kernel",
            call(|f, _| {
                f.client
                    .launch(f.s, &f.one_binding, [1, 1, 1], &[&f.x, &f.one], &[], &[])
            }),
            |e| matches!(e, Error::KernelMismatch { .. }),
        ),
        (
            "launch over another client's buffer",
            call(|f, _| {
                f.client
                    .launch(f.s, &f.one_binding, [1, 1, 1], &[&f.theirs], &[], &[])
            }),
            |e| matches!(e, Error::OtherClient(_)),
        ),
        (
            "builtin over too short a buffer",
            call(|f, _| {
                f.client
                    .run_builtin(f.s, Builtin::Add, &[&f.x, &f.one], N + 1, 0.0)
            }),
            |e| matches!(e, Error::BadLaunch(_)),
        ),
        (
            "replay a graph of the recording stream",
            call(|f, _| f.client.replay(&f.graph)),
            |e| matches!(e, Error::ReplayWhileRecording(_)),
        ),
        (
            "replay it by id",
            call(|f, _| f.client.replay_id(f.graph.id())),
            |e| matches!(e, Error::ReplayWhileRecording(_)),
        ),
        (
            "if on another client's flag",
            call(|f, _| f.client.if_flag(f.s, &f.theirs, || Ok(())).map(drop)),
            |e| matches!(e, Error::OtherClient(_)),
        ),
        (
            "if/else on a flag shorter than a u32",
            call(|f, _| {
                let short = f.x.range(0, 2).expect("a view");
                f.client
                    .if_else_flag(f.s, &short, || Ok(()), || Ok(()))
                    .map(drop)
            }),
            |e| matches!(e, Error::BadFlag { .. }),
        ),
        (
            "while on another stream's flag",
            call(|f, _| {
                let theirs = f.client.create(f.t, &[0; 4])?;
                f.client.while_flag(f.s, &theirs, 2, || Ok(())).map(drop)
            }),
            |e| matches!(e, Error::BadFlag { .. }),
        ),
    ]
}

#[test]
fn every_refused_call_of_the_recording_thread_dooms_its_window_in_a_body_too() {
    let f = Fx::new();
    let mut covered = 0;
    for (what, call, is_its_refusal) in refused_calls() {
        for in_body in [false, true] {
            let place = if in_body { "in a body" } else { "at the top" };
            let (result, closed) = f.window_with(in_body, &call);
            let Err(err) = result else {
                panic!("{what} {place}: not refused");
            };
            assert!(is_its_refusal(&err), "{what} {place}: refused with {err}");
            match closed {
                Err(Error::Doomed(cause)) => {
                    assert_eq!(*cause, err, "{what} {place}: doomed by what refused it");
                }
                Err(other) => panic!("{what} {place}: closed with {other}"),
                Ok(_) => panic!("{what} {place}: the window sealed"),
            }
            covered += 1;
        }
    }
    assert_eq!(covered, 2 * refused_calls().len());
    // The stream records again after every one of them.
    f.client.write_f32(&f.x, &[0.0; N as usize]).expect("reset");
    let (graph, ()) = f.client.capture(f.s, |_| f.add()).expect("capture");
    f.client.replay(&graph).expect("replay");
}

/// Calls that change nothing.
fn harmless_calls() -> Vec<(&'static str, Call)> {
    vec![
        (
            "prepare again",
            call(|f, _| f.client.prepare(f.s).map(drop)),
        ),
        ("begin again", call(|f, w| f.client.begin(f.s, w))),
        (
            "adopt another window",
            call(|f, w| f.client.adopt(f.s, WindowId(w.0 + 100))),
        ),
        (
            "queries",
            call(|f, _| {
                f.client.phase(f.s)?;
                f.client.usage(f.s)?;
                f.client.graph_info(&f.graph)?;
                f.client.graph_dot(&f.graph)?;
                assert!(f.client.is_live(&f.graph));
                let _ = (
                    f.client.live_graphs(),
                    f.client.claimed_buffers(),
                    f.client.lingering_buffers(),
                    f.client.device_info(),
                );
                Ok(())
            }),
        ),
        (
            "a buffer of another client, naming no stream of this one",
            call(|f, _| f.client.write(&f.theirs, &[0; 4])),
        ),
        (
            "its device slice",
            call(|f, _| f.client.with_device_slice(&f.theirs, |_| ())),
        ),
        (
            "another device's stream adopted",
            call(|f, _| {
                let raw = <Host as capture_core::Driver>::create_stream(f.other.device())?;
                f.client.adopt_stream(raw).map(drop)
            }),
        ),
        (
            "another thread's launch",
            call(|f, _| {
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| f.add())
                        .join()
                        .unwrap_or(Err(Error::Poisoned))
                })
            }),
        ),
        (
            "work and destroys on another stream",
            call(|f, _| {
                let y = f.client.create_f32(f.t, &[0.0; 4])?;
                f.client.read(&y)?;
                f.client.sync(f.t)?;
                let gone = f.client.create_stream()?;
                f.client.destroy_stream(gone)
            }),
        ),
    ]
}

#[test]
fn capture_calls_out_of_order_queries_and_other_threads_doom_nothing() {
    let f = Fx::new();
    for (what, call) in harmless_calls() {
        for in_body in [false, true] {
            let place = if in_body { "in a body" } else { "at the top" };
            let (_, closed) = f.window_with(in_body, &call);
            let graph = closed.unwrap_or_else(|err| panic!("{what} {place}: {err}"));
            f.client.replay(&graph).expect("replay");
        }
    }
    // A close from inside a body is a capture call out of order: refused,
    // and the window seals after the body.
    let (inside, closed) = f.window_with(true, &|f, w| f.client.instantiate(f.s, w).map(drop));
    assert!(
        matches!(inside, Err(Error::OutOfOrder { .. })),
        "{inside:?}"
    );
    closed.expect("sealed after the body");
    // The other client's graph cannot be destroyed from this one.
    let other_stream = f.other.create_stream().expect("stream");
    let (theirs, ()) = f
        .other
        .capture(other_stream, |_| Ok(()))
        .expect("their graph");
    f.client.destroy(&theirs).expect("a no-op");
    assert!(f.other.is_live(&theirs));
}
