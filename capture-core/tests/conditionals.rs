//! Conditionals and loops through the client, on the reference backend:
//! what they run on the host's word, what a recording keeps of them, and
//! what they refuse.

use backend_host::{Host, Kernel as HostKernel};
use capture_core::{Access, Buffer, Builtin, Client, Error, Kernel, Ran, Signature, StreamId};

const N: u32 = 16;

struct Fixture {
    client: Client<Host>,
    stream: StreamId,
    flag: Buffer,
    counter: Buffer,
    x: Buffer,
    one: Buffer,
    countdown: Kernel<Host>,
}

impl Fixture {
    fn new() -> Self {
        let client = Client::<Host>::open().expect("host");
        let stream = client.create_stream().expect("stream");
        let countdown = HostKernel::new(
            Signature::new("countdown").bindings(&[Access::ReadWrite, Access::Write]),
            |group, buffers| {
                let [counter, flag] = buffers else {
                    return Err("two buffers".into());
                };
                if group.elements_x(1).is_empty() {
                    return Ok(());
                }
                let c = &mut counter.f32_mut()?[0];
                *c -= 1.0;
                flag.u32_mut()?[0] = u32::from(*c > 0.5);
                Ok(())
            },
        )
        .expect("kernel");
        Self {
            flag: client.create(stream, &[0; 4]).expect("flag"),
            counter: client.create_f32(stream, &[0.0]).expect("counter"),
            x: client.create_f32(stream, &[0.0; N as usize]).expect("x"),
            one: client.create_f32(stream, &[1.0; N as usize]).expect("one"),
            countdown: Kernel::new(countdown),
            client,
            stream,
        }
    }

    fn set(&self, flag: u32, counter: f32) {
        self.client
            .write(&self.flag, &flag.to_le_bytes())
            .expect("flag");
        self.client
            .write_f32(&self.counter, &[counter])
            .expect("counter");
    }

    fn add(&self) -> Result<(), Error> {
        self.client
            .run_builtin(self.stream, Builtin::Add, &[&self.x, &self.one], N, 0.0)
    }

    fn step(&self) -> Result<(), Error> {
        self.add()?;
        self.client.launch(
            self.stream,
            &self.countdown,
            [1, 1, 1],
            &[&self.counter, &self.flag],
            &[],
            &[],
        )
    }

    fn x(&self) -> f32 {
        self.client.read_f32(&self.x).expect("x")[0]
    }

    fn flag(&self) -> u32 {
        let bytes = self.client.read(&self.flag).expect("flag");
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
}

#[test]
fn eager_conditionals_say_what_they_ran() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    f.set(1, 0.0);
    assert_eq!(c.if_flag(s, &f.flag, || f.add()), Ok(Ran::Branch(Some(0))));
    f.set(0, 0.0);
    assert_eq!(c.if_flag(s, &f.flag, || f.add()), Ok(Ran::Branch(None)));
    assert_eq!(f.x(), 1.0, "the body ran once");
    let twice = || {
        f.add()?;
        f.add()
    };
    assert_eq!(
        c.if_else_flag(s, &f.flag, || f.add(), twice),
        Ok(Ran::Branch(Some(1)))
    );
    assert_eq!(f.x(), 3.0, "the else body");
    for (counter, bound, iterations, reached) in [
        (0.0, 4, 0, false),
        (1.0, 4, 1, false),
        (4.0, 4, 4, false),
        (9.0, 4, 4, true),
    ] {
        f.set(u32::from(counter > 0.0), counter);
        let ran = c.while_flag(s, &f.flag, bound, || f.step());
        assert_eq!(
            ran,
            Ok(Ran::Loop {
                iterations,
                bound_reached: reached
            }),
            "{counter} counted down, at most {bound}"
        );
        assert_eq!(
            f.flag() != 0,
            reached,
            "the flag says whether the bound stopped it"
        );
    }
    f.set(1, 0.0);
    assert_eq!(
        c.while_flag(s, &f.flag, 0, || f.step()),
        Ok(Ran::Loop {
            iterations: 0,
            bound_reached: true
        }),
        "a bound of 0 with the flag set"
    );
    // A body's error stops it and comes back.
    let failing = c.if_flag(s, &f.flag, || Err(Error::BadLaunch("mine".into())));
    assert_eq!(failing, Err(Error::BadLaunch("mine".into())));
}

#[test]
fn a_flag_is_a_u32_of_the_conditionals_stream() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    let short = c.create(s, &[1, 2, 3]).expect("three bytes");
    let err = c.if_flag(s, &short, || f.add()).expect_err("three bytes");
    assert!(matches!(err, Error::BadFlag { .. }), "{err}");
    assert!(err.to_string().contains("3 byte(s)"), "{err}");
    let other = c.create_stream().expect("other stream");
    let theirs = c.create(other, &1u32.to_le_bytes()).expect("theirs");
    let err = c
        .if_flag(s, &theirs, || f.add())
        .expect_err("another stream's");
    assert!(err.to_string().contains("belongs to"), "{err}");
    // A view of four bytes is a flag.
    let wide = c.create(s, &[0; 512]).expect("wide");
    c.write(&wide, &[1; 512]).expect("raise");
    let view = wide.range(256, 4).expect("view");
    assert_eq!(c.if_flag(s, &view, || f.add()), Ok(Ran::Branch(Some(0))));
    // A conditional on a stream joined to another's window is refused.
    let window = c.prepare(other).expect("prepare");
    c.begin(other, window).expect("begin");
    c.wait(s, other).expect("join");
    let err = c.if_flag(s, &f.flag, || f.add()).expect_err("joined");
    assert!(matches!(err, Error::OutOfOrder { .. }), "{err}");
    c.wait(other, s).expect("join back");
    drop(c.instantiate(other, window));
}

#[test]
fn a_recorded_loop_replays_on_the_devices_word_and_counts_inside_its_body() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    f.set(1, 1.0);
    let (graph, ran) = c
        .capture(s, |_| {
            c.run_builtin(s, Builtin::Fill, &[&f.counter], 1, 3.0)?;
            c.run_builtin(s, Builtin::Fill, &[&f.flag], 1, 1.0)?;
            c.while_flag(s, &f.flag, 5, || {
                f.add()?;
                c.if_flag(s, &f.flag, || f.add())?;
                f.step()
            })
        })
        .expect("capture");
    assert_eq!(ran, Ran::Recorded);
    let info = c.graph_info(&graph).expect("info");
    assert_eq!((info.launches, info.conditionals, info.copies), (6, 2, 0));
    let dot = c.graph_dot(&graph).expect("dot");
    assert!(dot.contains("subgraph cluster_n2_0 {"), "{dot}");
    assert!(dot.contains("n2_0_1 [label=\"1: if"), "{dot}");
    c.write_f32(&f.x, &[0.0; N as usize]).expect("reset");
    graph.replay().expect("replay");
    // Three iterations: two adds each, and the inner if's on the first two
    // (the countdown clears the flag only at the third step's end).
    assert_eq!(f.x(), 9.0);
    assert_eq!(f.flag(), 0);
}

#[test]
fn a_recorded_if_else_on_a_wide_flags_first_word_runs_one_body_a_replay() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    // A flag of 64 bytes: its first word decides, the host driver refuses
    // any other than a four-byte one.
    let wide = c.create(s, &[0; 64]).expect("wide flag");
    let twice = || {
        f.add()?;
        f.add()
    };
    let (graph, ran) = c
        .capture(s, |_| c.if_else_flag(s, &wide, || f.add(), twice))
        .expect("capture");
    assert_eq!(ran, Ran::Recorded);
    for (word, want) in [(1u32, 1.0), (0, 2.0), (7, 1.0)] {
        let mut bytes = [9u8; 64];
        bytes[..4].copy_from_slice(&word.to_le_bytes());
        c.write(&wide, &bytes).expect("flag");
        c.write_f32(&f.x, &[0.0; N as usize]).expect("reset");
        graph.replay().expect("replay");
        assert_eq!(f.x(), want, "the flag's first word {word}");
    }
}

#[test]
fn writes_inside_a_body_renew_no_claim() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    // Claim x: a window that would write it is refused.
    let window = c.prepare(s).expect("prepare");
    c.begin(s, window).expect("begin");
    f.add().expect("recorded");
    c.launch(s, &f.countdown, [1, 1, 1], &[&f.counter], &[], &[])
        .expect_err("a mismatched launch dooms the window");
    c.instantiate(s, window).expect_err("doomed");
    assert!(matches!(c.read(&f.x), Err(Error::Claimed { .. })));
    // A graph that fills x only inside an if leaves the claim: its warmup
    // and its replay skip the body.
    f.set(0, 0.0);
    let fill = || c.run_builtin(s, Builtin::Fill, &[&f.x], N, 2.0);
    let (inside, _) = c
        .capture(s, |_| c.if_flag(s, &f.flag, fill))
        .expect("capture inside");
    inside.replay().expect("replay");
    assert!(
        matches!(c.read(&f.x), Err(Error::Claimed { .. })),
        "a body that may not run renews nothing"
    );
    let (outside, ()) = c.capture(s, |_| fill()).expect("capture outside");
    outside.replay().expect("replay");
    assert_eq!(f.x(), 2.0, "a write outside a body renews");
}

#[test]
fn a_body_that_fails_or_panics_dooms_its_window_and_the_stream_records_again() {
    let f = Fixture::new();
    let (c, s) = (&f.client, f.stream);
    // The warmup runs the else only: the then's info bytes must be known.
    f.add().expect("an add before");
    f.set(0, 0.0);
    let err = c
        .capture(s, |pass| {
            c.if_else_flag(
                s,
                &f.flag,
                || f.add(),
                || match pass {
                    capture_core::Pass::Record => Err(Error::BadLaunch("the else failed".into())),
                    capture_core::Pass::Warmup => Ok(()),
                },
            )
        })
        .expect_err("a failing else");
    assert!(err.to_string().contains("the else failed"), "{err}");
    assert!(
        matches!(c.read(&f.x), Err(Error::Claimed { .. })),
        "what the bodies would have written is claimed"
    );
    c.write_f32(&f.x, &[0.0; N as usize])
        .expect("written afresh");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.capture(s, |pass| {
            c.if_flag(s, &f.flag, || {
                assert!(pass != capture_core::Pass::Record, "the body panics");
                Ok(())
            })
        })
    }));
    assert!(panicked.is_err(), "the panic comes through");
    assert_eq!(
        c.phase(s),
        Ok(capture_core::Phase::None),
        "the window closed"
    );
    // A wait between streams inside a body is refused.
    let other = c.create_stream().expect("other");
    f.set(1, 0.0);
    let err = c
        .capture(s, |_| c.if_flag(s, &f.flag, || c.wait(s, other)))
        .expect_err("a wait in a body");
    assert!(matches!(err.root(), Error::InBody { .. }), "{err}");
    // A close from inside a body is refused; the one after it seals.
    let window = c.prepare(s).expect("prepare");
    f.add().expect("warmup");
    c.begin(s, window).expect("begin");
    let mut inside = None;
    c.if_flag(s, &f.flag, || {
        inside = Some(c.instantiate(s, window));
        f.add()
    })
    .expect("the body");
    assert!(
        matches!(inside, Some(Err(Error::OutOfOrder { .. }))),
        "{inside:?}"
    );
    let graph = c.instantiate(s, window).expect("the close after the body");
    c.write_f32(&f.x, &[0.0; N as usize]).expect("reset");
    graph.replay().expect("replay");
    assert_eq!(f.x(), 1.0);
}

#[test]
fn loops_record_on_several_threads_at_once_and_another_thread_is_refused_inside_a_body() {
    let f = Fixture::new();
    let (c, countdown) = (&f.client, &f.countdown);
    // Four threads, each capturing and replaying a loop on a stream of its
    // own, at once.
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            scope.spawn(move || {
                let s = c.create_stream().expect("stream");
                let flag = c.create(s, &[0; 4]).expect("flag");
                let counter = c.create_f32(s, &[0.0]).expect("counter");
                let x = c.create_f32(s, &[0.0; N as usize]).expect("x");
                let one = c.create_f32(s, &[1.0; N as usize]).expect("one");
                let body = || {
                    c.run_builtin(s, Builtin::Add, &[&x, &one], N, 0.0)?;
                    c.launch(s, countdown, [1, 1, 1], &[&counter, &flag], &[], &[])
                };
                let (graph, _) = c
                    .capture(s, |_| {
                        c.run_builtin(s, Builtin::Fill, &[&counter], 1, (t + 1) as f32)?;
                        c.run_builtin(s, Builtin::Fill, &[&flag], 1, 1.0)?;
                        c.while_flag(s, &flag, 8, body)
                    })
                    .expect("capture");
                c.write_f32(&x, &[0.0; N as usize]).expect("reset");
                for _ in 0..10 {
                    graph.replay().expect("replay");
                }
                let want = 10.0 * (t + 1) as f32;
                assert_eq!(c.read_f32(&x).expect("x")[0], want, "thread {t}");
            });
        }
    });
    // While one thread records a body, another's launch on the stream is
    // refused and never enters the body; the window still seals.
    let (c, s) = (&f.client, f.stream);
    f.set(1, 0.0);
    let window = c.prepare(s).expect("prepare");
    f.add().expect("warmup");
    c.begin(s, window).expect("begin");
    c.if_flag(s, &f.flag, || {
        let other = std::thread::scope(|scope| scope.spawn(|| f.add()).join().expect("thread"));
        assert!(matches!(other, Err(Error::NotRecorder { .. })), "{other:?}");
        f.add()
    })
    .expect("the body");
    let graph = c.instantiate(s, window).expect("seals");
    assert_eq!(c.graph_info(&graph).expect("info").launches, 1);
}
