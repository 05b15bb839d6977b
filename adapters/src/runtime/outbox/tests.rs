use super::*;
use std::sync::mpsc;
use std::task::Context;

use tungstenite::Message;

/// The tests' shared sink.
type Sink = SharedSink<Scripted, Tungstenite>;

/// What a [`Scripted`] sink refuses.
#[derive(Default)]
struct Refusals {
    /// Refuse every `n`th poll of each kind (0: none).
    every: usize,
    /// Refuse the next this many `poll_ready`s, then the next this many `poll_flush`es.
    ready: usize,
    flush: usize,
    /// Fail the next `start_send`.
    fail_send: bool,
    /// Run at the next `poll_ready`: another send arriving while one is written.
    meanwhile: Option<Box<dyn FnOnce() + Send>>,
}

/// A sink that reports each message once a flush took it (with whether a sender's own
/// thread flushed it) and refuses as told (each refusal wakes its caller at once, as a
/// socket that drained would).
struct Scripted {
    refusals: Refusals,
    polls: [usize; 2],
    unflushed: Vec<Vec<u8>>,
    flushed: mpsc::Sender<(Vec<u8>, bool)>,
}

fn on_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

impl Scripted {
    fn new(refusals: Refusals) -> (Arc<Sink>, mpsc::Receiver<(Vec<u8>, bool)>) {
        let (flushed, arrived) = mpsc::channel();
        let sink = Scripted {
            refusals,
            polls: [0; 2],
            unflushed: Vec::new(),
            flushed,
        };
        (Arc::new(SharedSink::new(sink)), arrived)
    }

    /// Whether this poll (`kind` 0: ready, 1: flush) is refused.
    fn refuses(&mut self, kind: usize, cx: &Context<'_>) -> bool {
        self.polls[kind] += 1;
        let once = if kind == 0 {
            &mut self.refusals.ready
        } else {
            &mut self.refusals.flush
        };
        let refused = if *once > 0 {
            *once -= 1;
            true
        } else {
            self.refusals.every > 0 && self.polls[kind].is_multiple_of(self.refusals.every)
        };
        if refused {
            cx.waker().wake_by_ref();
        }
        refused
    }
}

impl futures_util::Sink<Message> for Scripted {
    type Error = ();
    fn poll_ready(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        if let Some(arrive) = self.refusals.meanwhile.take() {
            arrive();
        }
        if self.refuses(0, cx) {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
    fn start_send(mut self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), ()> {
        if std::mem::take(&mut self.refusals.fail_send) {
            return Err(());
        }
        let bytes = match item {
            Message::Close(frame) => {
                format!("close {}", frame.map_or(0, |f| u16::from(f.code))).into_bytes()
            }
            Message::Ping(_) => b"ping".to_vec(),
            other => other.into_data().to_vec(),
        };
        self.unflushed.push(bytes);
        Ok(())
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        if self.refuses(1, cx) {
            return Poll::Pending;
        }
        let by_sender = !on_runtime();
        for bytes in std::mem::take(&mut self.unflushed) {
            let _ = self.flushed.send((bytes, by_sender));
        }
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
        Poll::Ready(Ok(()))
    }
}

fn send(outbox: &Outbox, text: &str) {
    outbox.push(Out::Send(text.as_bytes().to_vec()));
}

/// A fresh outbox whose writer runs on `runtime`, writing to a [`Scripted`] sink.
struct Started {
    sink: Arc<Sink>,
    arrived: mpsc::Receiver<(Vec<u8>, bool)>,
    outbox: Arc<Outbox>,
    writer: tokio::task::JoinHandle<()>,
}

/// A single-threaded runtime that runs the writer only when a test lets it, and a writer
/// on it already parked, waiting for a message.
fn parked_writer() -> (Arc<tokio::runtime::Runtime>, Started) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let started = start(&runtime, Refusals::default());
    runtime.block_on(tokio::task::yield_now());
    (Arc::new(runtime), started)
}

fn start(runtime: &tokio::runtime::Runtime, refusals: Refusals) -> Started {
    let (sink, arrived) = Scripted::new(refusals);
    let outbox = Arc::new(Outbox::default());
    outbox.write_directly_to(sink.clone());
    let writer = runtime.spawn({
        let (outbox, sink) = (outbox.clone(), sink.clone());
        async move { write_queued(&outbox, &sink).await }
    });
    Started {
        sink,
        arrived,
        outbox,
        writer,
    }
}

/// Each path on one thread, with a single-threaded runtime that runs the writer only when
/// the test lets it: a send to an idle socket is flushed by the sender itself; a flush the
/// socket refuses, a sink that is not ready and a large message are finished by the
/// writer, in order; a failed send stops the writer, and nothing is written after it.
#[test]
fn each_path_of_a_send() {
    let (
        runtime,
        Started {
            sink,
            arrived,
            outbox,
            writer,
        },
    ) = parked_writer();
    let let_the_writer_run = || runtime.block_on(tokio::task::yield_now());
    send(&outbox, "direct");
    assert_eq!(arrived.try_recv(), Ok((b"direct".to_vec(), true)));
    // The socket takes the message, not its flush: the writer flushes it.
    sink.lock().refusals.flush = 1;
    send(&outbox, "flush owed");
    send(&outbox, "queued behind it");
    assert!(arrived.try_recv().is_err(), "nothing flushed yet");
    let_the_writer_run();
    assert_eq!(arrived.try_recv(), Ok((b"flush owed".to_vec(), false)));
    assert_eq!(
        arrived.try_recv(),
        Ok((b"queued behind it".to_vec(), false))
    );
    // The sink is not ready: the bytes go to the writer, before what another sender
    // queued meanwhile and what follows.
    let other = outbox.clone();
    sink.lock().refusals = Refusals {
        ready: 1,
        meanwhile: Some(Box::new(move || send(&other, "meanwhile"))),
        ..Refusals::default()
    };
    send(&outbox, "not ready");
    send(&outbox, &"x".repeat(DIRECT_MAX + 1));
    let_the_writer_run();
    assert_eq!(arrived.try_recv(), Ok((b"not ready".to_vec(), false)));
    assert_eq!(arrived.try_recv(), Ok((b"meanwhile".to_vec(), false)));
    let (large, by_sender) = arrived.try_recv().unwrap();
    assert_eq!((large.len(), by_sender), (DIRECT_MAX + 1, false));
    // Idle again: direct again.
    send(&outbox, "direct again");
    assert_eq!(arrived.try_recv(), Ok((b"direct again".to_vec(), true)));
    // A failed send stops the writer; what follows is not written.
    sink.lock().refusals.fail_send = true;
    send(&outbox, "refused");
    send(&outbox, "after the failure");
    let_the_writer_run();
    assert!(writer.is_finished(), "the writer stops after a failed send");
    assert!(
        arrived.try_recv().is_err(),
        "nothing is written after a failure"
    );
    send(&outbox, "later");
    assert!(
        arrived.try_recv().is_err(),
        "nothing goes directly after the writer stopped"
    );
    assert_eq!(
        Arc::strong_count(&sink),
        1,
        "the stopped writer lets the sink go"
    );
}

/// A shut while a sender writes directly (the writer, woken by it, polls during the
/// write): the writer waits for the sender, finishes the flush it left if it left one,
/// then ends.
#[test]
fn a_shut_during_a_direct_send_lets_it_finish() {
    for flush_owed in [false, true] {
        let (runtime, started) = parked_writer();
        let Started {
            sink,
            arrived,
            outbox,
            writer,
        } = started;
        let (other, during) = (outbox.clone(), runtime.clone());
        sink.lock().refusals = Refusals {
            flush: usize::from(flush_owed),
            meanwhile: Some(Box::new(move || {
                other.shut();
                during.block_on(tokio::task::yield_now());
            })),
            ..Refusals::default()
        };
        send(&outbox, "last");
        runtime.block_on(tokio::task::yield_now());
        let by_sender = !flush_owed;
        assert_eq!(arrived.try_recv(), Ok((b"last".to_vec(), by_sender)));
        assert!(
            writer.is_finished(),
            "the writer ends (flush owed: {flush_owed})"
        );
    }
}

/// Senders on several threads, a sink that refuses every third poll of each kind: every
/// message is flushed once, in each sender's order, whichever thread wrote it (which
/// path each took depends on the scheduling; `each_path_of_a_send` covers each).
#[test]
fn direct_and_queued_sends_keep_each_senders_order() {
    const SENDERS: usize = 4;
    const EACH: usize = 2_000;
    const WAIT: std::time::Duration = std::time::Duration::from_secs(20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let Started {
        arrived,
        outbox,
        writer,
        ..
    } = start(
        &runtime,
        Refusals {
            every: 3,
            ..Refusals::default()
        },
    );
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let outbox = outbox.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    send(&outbox, &format!("{sender}:{i}"));
                }
            })
        })
        .collect();
    let mut next = [0usize; SENDERS];
    for _ in 0..SENDERS * EACH {
        let (bytes, _) = arrived
            .recv_timeout(WAIT)
            .expect("every message is flushed");
        let text = String::from_utf8(bytes).unwrap();
        let (sender, i) = text.split_once(':').unwrap();
        let (sender, i): (usize, usize) = (sender.parse().unwrap(), i.parse().unwrap());
        assert_eq!(i, next[sender], "sender {sender}'s order");
        next[sender] += 1;
    }
    for sender in senders {
        sender.join().unwrap();
    }
    outbox.shut();
    runtime
        .block_on(async { tokio::time::timeout(WAIT, writer).await })
        .expect("the writer ends once shut")
        .unwrap();
    assert!(arrived.try_recv().is_err(), "nothing is flushed twice");
}

/// A bounded outbox refuses a frame once its limit waits (a ping is taken regardless) and
/// has room again once the writer took one; a close put first goes before everything still
/// queued, which is dropped with whatever is sent after it.
#[test]
fn a_full_outbox_refuses_and_its_close_goes_first() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (sink, arrived) = Scripted::new(Refusals::default());
    // No direct sends: everything waits for the writer.
    let outbox = Outbox::bounded(2);
    assert!(outbox.send(b"1".to_vec()));
    outbox.ping();
    assert!(outbox.send(b"2".to_vec()));
    assert!(
        !outbox.send(b"3".to_vec()),
        "a third waiting frame is refused"
    );
    assert!(outbox.try_take().is_some(), "the writer takes the first");
    assert!(outbox.send(b"3".to_vec()), "room for one again");
    assert!(!outbox.send(b"4".to_vec()), "and only one");
    outbox.close_first(1011, "send queue full".into());
    assert!(
        outbox.send(b"after".to_vec()),
        "taken (and dropped) once shut"
    );
    runtime.block_on(write_queued(&outbox, &sink));
    assert_eq!(arrived.try_recv(), Ok((b"close 1011".to_vec(), false)));
    assert!(arrived.try_recv().is_err(), "nothing else is written");
    assert!(
        outbox.try_take().is_none(),
        "nor held: the frames behind the close are gone"
    );

    // Under the limit, in order, the ping among the frames; the writer ends once shut.
    let (sink, arrived) = Scripted::new(Refusals::default());
    let outbox = Outbox::bounded(2);
    assert!(outbox.send(b"1".to_vec()));
    outbox.ping();
    assert!(outbox.send(b"2".to_vec()));
    outbox.shut();
    runtime.block_on(write_queued(&outbox, &sink));
    let written: Vec<_> = arrived.try_iter().map(|(bytes, _)| bytes).collect();
    assert_eq!(written, [&b"1"[..], b"ping", b"2"]);
}

/// The watchdog's question: a write pending at two checks in a row with none finished
/// between is stalled; an idle socket, and one that wrote between, are not.
#[test]
fn a_watchdog_sees_a_write_that_does_not_move() {
    let (runtime, started) = parked_writer();
    let Started {
        sink,
        arrived,
        outbox,
        ..
    } = started;
    let let_the_writer_run = || runtime.block_on(tokio::task::yield_now());
    let mut last = LastCheck::default();
    assert!(!outbox.stalled(&mut last), "idle");
    sink.lock().refusals.flush = usize::MAX;
    send(&outbox, "stuck");
    assert!(
        !outbox.stalled(&mut last),
        "pending now, but the socket was idle at the last check"
    );
    let_the_writer_run();
    assert!(outbox.stalled(&mut last), "its flush has not moved since");
    assert!(outbox.stalled(&mut last), "still not");
    sink.lock().refusals.flush = 0;
    let_the_writer_run();
    assert_eq!(arrived.try_recv(), Ok((b"stuck".to_vec(), false)));
    // The next frame finds the sink not ready: pending at this check as at the last, but a
    // write finished between.
    sink.lock().refusals.ready = usize::MAX;
    send(&outbox, "next");
    assert!(!outbox.stalled(&mut last), "the flush finished since");
    assert!(outbox.stalled(&mut last), "the next write has not moved");
    sink.lock().refusals.ready = 0;
    let_the_writer_run();
    assert_eq!(arrived.try_recv(), Ok((b"next".to_vec(), false)));
    assert!(!outbox.stalled(&mut last), "idle again");
}

/// A writer dropped before it ends (its task aborted, or a watchdog gave up on it) stops
/// the direct sends too and lets the sink go.
#[test]
fn a_writer_dropped_unfinished_stops_direct_sends() {
    let (runtime, started) = parked_writer();
    started.writer.abort();
    let _ = runtime.block_on(started.writer);
    send(&started.outbox, "after");
    assert!(started.arrived.try_recv().is_err(), "nothing is written");
    assert_eq!(Arc::strong_count(&started.sink), 1, "the sink is let go");
}
