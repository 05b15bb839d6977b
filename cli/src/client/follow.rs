//! Following one execution's output (`GET /v1/executions/{id}/output`, Server-Sent Events):
//! each part of stdout and stderr as the run writes it, then the execution's end. A dropped
//! connection or a restarting server is asked again from where the follower stands (no part
//! is shown twice or missed), with a growing pause, a bounded number of times in a row.
//!
//! This module owns the event stream's reading, the resumption and the Ctrl-C that reaches
//! a follower. It never prints: the caller says what each event means to a person.

use std::io::{BufRead as _, BufReader};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::Context as _;
use outpost_core::api::{Execution, OutputEvent, OutputStatus};
use outpost_core::wire::OutputStream;

use super::api::{Api, ApiError};

/// How many times in a row the server may be unreachable while an execution is followed.
pub const FOLLOW_ATTEMPTS: u32 = 12;
/// The first pause after the server was unreachable; each next one doubles, up to 5 s.
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// A stream silent this long (the server comments every 15 s) is taken as dropped.
const SILENCE: Duration = Duration::from_secs(45);

/// The line a person reads when the server could not be reached and is asked again.
pub fn retry_line(error: &ApiError, pause: Duration, attempt: u32) -> String {
    format!(
        "outpost: {error}; asking again in {} ms ({attempt}/{FOLLOW_ATTEMPTS})…",
        pause.as_millis()
    )
}

/// What the follower's caller is shown.
#[derive(Debug)]
pub enum Seen<'a> {
    /// New output: only the part not shown before.
    Output(&'a OutputEvent),
    /// Where an execution that has not started stands.
    Status(&'a OutputStatus),
    /// The server could not be reached; it is asked again after `pause`.
    Retrying {
        /// What went wrong.
        error: &'a ApiError,
        /// The pause before the next attempt.
        pause: Duration,
        /// This attempt's number, from 1.
        attempt: u32,
    },
    /// Ctrl-C (only when the caller asked to hear it).
    Interrupt,
}

/// What the caller answers to what it was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Keep following.
    Go,
    /// Stop following now.
    Stop,
}

/// How following ended.
#[derive(Debug)]
pub enum Followed {
    /// The execution ended (without `stdout`/`stderr`: the output events carried them).
    Ended(Box<Execution>),
    /// The caller said [`Step::Stop`].
    Stopped,
    /// Not following (`follow: false`): everything there is now was shown.
    Caught,
}

/// What a reader thread hears, tagged with its attempt.
enum Heard {
    Event(u32, String, String),
    Alive(u32),
    Closed(u32, Option<ApiError>),
    Interrupt,
}

/// Follows execution `id` from its start: to its end when `follow`, else what there is now.
/// With `interrupts`, Ctrl-C is handed to `on` as [`Seen::Interrupt`] instead of ending the
/// process.
pub fn follow(
    api: &Api,
    id: &str,
    follow: bool,
    interrupts: bool,
    on: &mut dyn FnMut(Seen<'_>) -> anyhow::Result<Step>,
) -> anyhow::Result<Followed> {
    let (tx, rx) = mpsc::channel();
    if interrupts {
        let tx = tx.clone();
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT])
            .context("listening for Ctrl-C")?;
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if tx.send(Heard::Interrupt).is_err() {
                    break;
                }
            }
        });
    }
    let (mut stdout, mut stderr) = (0u64, 0u64);
    let mut attempt = 1u32;
    let mut failures = 0u32;
    let mut pause = FIRST_PAUSE;
    let open = |attempt: u32, stdout: u64, stderr: u64| {
        let path =
            format!("/v1/executions/{id}/output?follow={follow}&stdout={stdout}&stderr={stderr}");
        let tx = tx.clone();
        let api = api.clone();
        std::thread::spawn(move || read_stream(&api, &path, attempt, &tx));
    };
    open(attempt, stdout, stderr);
    loop {
        let heard = match rx.recv_timeout(SILENCE) {
            Ok(heard) => heard,
            Err(RecvTimeoutError::Timeout) => Heard::Closed(attempt, None),
            Err(RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        };
        match heard {
            Heard::Interrupt => {
                if on(Seen::Interrupt)? == Step::Stop {
                    return Ok(Followed::Stopped);
                }
            }
            Heard::Event(a, ..) | Heard::Alive(a) | Heard::Closed(a, _) if a != attempt => {}
            Heard::Alive(_) => {}
            Heard::Event(_, name, data) => {
                failures = 0;
                pause = FIRST_PAUSE;
                match name.as_str() {
                    "output" => {
                        let event: OutputEvent = serde_json::from_str(&data)
                            .context("the server's output event does not read")?;
                        let have = match event.stream {
                            OutputStream::Stdout => &mut stdout,
                            OutputStream::Stderr => &mut stderr,
                        };
                        if let Some(new) = unseen(&event, *have) {
                            *have = new.offset + new.text.len() as u64;
                            if on(Seen::Output(&new))? == Step::Stop {
                                return Ok(Followed::Stopped);
                            }
                        }
                    }
                    "status" => {
                        let status: OutputStatus = serde_json::from_str(&data)
                            .context("the server's status event does not read")?;
                        if on(Seen::Status(&status))? == Step::Stop {
                            return Ok(Followed::Stopped);
                        }
                    }
                    "end" => {
                        let execution: Execution = serde_json::from_str(&data)
                            .context("the server's end event does not read")?;
                        return Ok(Followed::Ended(Box::new(execution)));
                    }
                    "error" => {
                        let answer: outpost_core::api::ErrorAnswer = serde_json::from_str(&data)
                            .context("the server's error event does not read")?;
                        anyhow::bail!("{} ({})", answer.error.message, answer.error.code);
                    }
                    // A newer server's event this client does not know.
                    _ => {}
                }
            }
            Heard::Closed(_, None) if !follow => return Ok(Followed::Caught),
            Heard::Closed(_, Some(e))
                if e.status != 0 || e.code == "server_certificate_untrusted" =>
            {
                return Err(e.into());
            }
            Heard::Closed(_, error) => {
                failures += 1;
                let error = error.unwrap_or_else(|| ApiError {
                    status: 0,
                    code: "stream_dropped".into(),
                    message: "the output stream ended before the execution did".into(),
                });
                if failures >= FOLLOW_ATTEMPTS {
                    return Err(error.into());
                }
                let step = on(Seen::Retrying {
                    error: &error,
                    pause,
                    attempt: failures,
                })?;
                if step == Step::Stop {
                    return Ok(Followed::Stopped);
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
                attempt += 1;
                open(attempt, stdout, stderr);
            }
        }
    }
}

/// The part of `event` past `have` bytes of its stream, if any.
fn unseen(event: &OutputEvent, have: u64) -> Option<OutputEvent> {
    let end = event.offset + event.text.len() as u64;
    if end <= have {
        return None;
    }
    let skip = usize::try_from(have.saturating_sub(event.offset)).ok()?;
    let text = event.text.get(skip..)?;
    Some(OutputEvent {
        stream: event.stream,
        offset: event.offset.max(have),
        text: text.to_owned(),
    })
}

/// Reads one connection's events into `tx` until it ends.
fn read_stream(api: &Api, path: &str, attempt: u32, tx: &mpsc::Sender<Heard>) {
    let body = match api.open_stream(path, None) {
        Ok(body) => body,
        Err(e) => {
            let _ = tx.send(Heard::Closed(attempt, Some(e)));
            return;
        }
    };
    let (mut name, mut data) = (String::new(), String::new());
    for line in BufReader::new(body).lines() {
        let Ok(line) = line else {
            break;
        };
        if line.is_empty() {
            if !data.is_empty() || !name.is_empty() {
                let event = std::mem::take(&mut name);
                let body = std::mem::take(&mut data);
                if tx.send(Heard::Event(attempt, event, body)).is_err() {
                    return;
                }
            }
        } else if line.starts_with(':') {
            if tx.send(Heard::Alive(attempt)).is_err() {
                return;
            }
        } else if let Some(value) = line.strip_prefix("event:") {
            name = value.trim_start().to_owned();
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    let _ = tx.send(Heard::Closed(attempt, None));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_unseen_part_of_an_event_is_shown() {
        let event = OutputEvent {
            stream: OutputStream::Stdout,
            offset: 4,
            text: "abcdef".into(),
        };
        assert!(unseen(&event, 10).is_none());
        assert_eq!(unseen(&event, 4).unwrap().text, "abcdef");
        let rest = unseen(&event, 7).unwrap();
        assert_eq!((rest.offset, rest.text.as_str()), (7, "def"));
        assert_eq!(unseen(&event, 0).unwrap().offset, 4);
    }
}
