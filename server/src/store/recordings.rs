//! Terminal recordings: one row per recorded session (`recordings`: who, where, when, its
//! size, whether input is in it and whether it was cut) and its asciicast text in append-only
//! chunks (`recording_chunks`), so appending never rewrites what is stored. A recording is
//! read back whole, chunks in order.
//!
//! This module stores and deletes; it never decides who may read a recording (the route does)
//! and never writes the format (core's `terminal::cast` does).

use std::collections::HashSet;

use super::db::{DbError, OptionalExtension as _, Sql as _, params};

use super::{Doing as _, Store, StoreError};

/// One recording as its row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordingEntry {
    /// The terminal's id (its execution's).
    pub(crate) exec_id: String,
    /// The context it ran on.
    pub(crate) context_id: String,
    /// The context's name when the session began.
    pub(crate) context_name: String,
    /// Who opened the terminal.
    pub(crate) opened_by: String,
    /// When recording began (Unix seconds).
    pub(crate) started_at: u64,
    /// When the session ended; `None` while it is open (or if the server stopped first).
    pub(crate) ended_at: Option<u64>,
    /// Bytes stored.
    pub(crate) size: u64,
    /// Whether operators' keystrokes are in it.
    pub(crate) records_input: bool,
    /// Whether it reached its bound (its last event is the marker saying so).
    pub(crate) truncated: bool,
}

/// What one append brings to one recording.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordingAppend {
    /// The recording.
    pub(crate) exec_id: String,
    /// Lines to append.
    pub(crate) text: String,
    /// The recording reached its bound.
    pub(crate) truncated: bool,
    /// The session ended at this time (Unix seconds).
    pub(crate) ended_at: Option<u64>,
}

/// The columns [`entry_of`] reads, in its order.
const COLUMNS: &str = "exec_id, context_id, context_name, opened_by, started_at, ended_at, size,
     records_input, truncated";

fn entry_of(r: &super::db::Row) -> Result<RecordingEntry, DbError> {
    Ok(RecordingEntry {
        exec_id: r.get(0)?,
        context_id: r.get(1)?,
        context_name: r.get(2)?,
        opened_by: r.get(3)?,
        started_at: r.get::<i64>(4)? as u64,
        ended_at: r.get::<Option<i64>>(5)?.map(|t| t as u64),
        size: r.get::<i64>(6)? as u64,
        records_input: r.get(7)?,
        truncated: r.get(8)?,
    })
}

/// The marker a recording cut by its server's stop ends with.
pub(crate) const CUT_MARKER: &str =
    "the server stopped before the session ended; what followed was not recorded";

/// The time of the last event line of `text` (a recording's chunk), in seconds.
fn last_event_seconds(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| l.starts_with('['))?;
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value.get(0)?.as_f64()
}

impl Store {
    /// Writes one batch in one transaction: the rows of sessions that began (`starts`), then
    /// what `appends` bring (lines, a cut, an end). An append to a recording without a row
    /// stores nothing. The rows name no node: [`Store::write_recordings_on`] names one.
    #[cfg(test)]
    pub(crate) fn write_recordings(
        &self,
        starts: &[RecordingEntry],
        appends: &[RecordingAppend],
    ) -> Result<(), StoreError> {
        self.write_recordings_on(None, starts, appends)
    }

    /// [`Store::write_recordings`], the rows of the sessions that began naming `node_id`, the
    /// node whose relay records them (so that a node starting while it lives leaves them
    /// open: [`Store::end_cut_recordings_except`]).
    pub(crate) fn write_recordings_on(
        &self,
        node_id: Option<&str>,
        starts: &[RecordingEntry],
        appends: &[RecordingAppend],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("writing recordings")?;
        for entry in starts {
            tx.execute(
                "INSERT INTO recordings (exec_id, context_id, context_name, opened_by,
                     started_at, size, records_input, truncated, node_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 0, ?7) ON CONFLICT DO NOTHING",
                params![
                    entry.exec_id,
                    entry.context_id,
                    entry.context_name,
                    entry.opened_by,
                    entry.started_at as i64,
                    entry.records_input,
                    node_id,
                ],
            )
            .doing("starting a recording")?;
        }
        for a in appends {
            let known = tx
                .execute(
                    "UPDATE recordings SET size = size + ?2, truncated = CASE WHEN ?3 = 1 THEN 1 ELSE truncated END,
                         ended_at = COALESCE(?4, ended_at)
                     WHERE exec_id = ?1",
                    params![
                        a.exec_id,
                        a.text.len() as i64,
                        a.truncated,
                        a.ended_at.map(|t| t as i64),
                    ],
                )
                .doing("appending to a recording")?;
            if known == 1 && !a.text.is_empty() {
                tx.execute(
                    "INSERT INTO recording_chunks (exec_id, seq, text)
                     VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM recording_chunks
                                  WHERE exec_id = ?1), ?2)",
                    params![a.exec_id, a.text],
                )
                .doing("appending to a recording")?;
            }
        }
        tx.commit().doing("writing recordings")
    }

    /// The row of recording `exec_id`.
    pub(crate) fn recording(&self, exec_id: &str) -> Result<Option<RecordingEntry>, StoreError> {
        self.read()
            .query_row(
                &format!("SELECT {COLUMNS} FROM recordings WHERE exec_id = ?1"),
                params![exec_id],
                entry_of,
            )
            .optional()
            .doing("reading a recording")
    }

    /// Recordings newest first, at most `limit`: only those `opened_by` opened when given,
    /// only those of the context `context` names (its id, or its name then) when given.
    pub(crate) fn recordings(
        &self,
        opened_by: Option<&str>,
        context: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RecordingEntry>, StoreError> {
        self.read()
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM recordings
                     WHERE (CAST(?1 AS TEXT) IS NULL OR opened_by = ?1)
                       AND (CAST(?2 AS TEXT) IS NULL OR context_id = ?2 OR context_name = ?2)
                     ORDER BY started_at DESC, exec_id DESC LIMIT ?3"
                ),
                params![opened_by, context, limit],
                entry_of,
            )
            .doing("listing recordings")
    }

    /// Recording `exec_id`'s text, chunks in order (empty when it has none).
    pub(crate) fn recording_text(&self, exec_id: &str) -> Result<String, StoreError> {
        let chunks = self
            .read()
            .query_map(
                "SELECT text FROM recording_chunks WHERE exec_id = ?1 ORDER BY seq",
                params![exec_id],
                |r| r.get::<String>(0),
            )
            .doing("reading a recording")?;
        Ok(chunks.concat())
    }

    /// Ends the recordings a server stopped without ending (it was killed mid-session; no
    /// session outlives its server's relay): each ends when its last stored event happened,
    /// and one not cut at its bound gets the marker [`CUT_MARKER`] there. Returns how many.
    /// Every open recording: right for a node alone (see
    /// [`Store::end_cut_recordings_except`] for one of many).
    /// [`Store::end_cut_recordings_except`] with no other node alive.
    #[cfg(test)]
    pub(crate) fn end_cut_recordings(&self) -> Result<usize, StoreError> {
        self.end_cut_recordings_except(&HashSet::new())
    }

    /// [`Store::end_cut_recordings`] for a node among others: only the open recordings that
    /// name no node, or a node not in `live_elsewhere` (the other nodes live now, whose relays
    /// are still recording theirs).
    pub(crate) fn end_cut_recordings_except(
        &self,
        live_elsewhere: &HashSet<String>,
    ) -> Result<usize, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("ending cut recordings")?;
        let open: Vec<(String, i64, bool)> = tx
            .query_map(
                "SELECT exec_id, started_at, truncated, node_id FROM recordings
                 WHERE ended_at IS NULL",
                params![],
                |r| {
                    Ok((
                        (r.get(0)?, r.get(1)?, r.get(2)?),
                        r.get::<Option<String>>(3)?,
                    ))
                },
            )
            .doing("ending cut recordings")?
            .into_iter()
            .filter(|(_, node)| node.as_ref().is_none_or(|n| !live_elsewhere.contains(n)))
            .map(|(open, _)| open)
            .collect();
        for (exec_id, started_at, truncated) in &open {
            let last: Option<String> = tx
                .query_row(
                    "SELECT text FROM recording_chunks WHERE exec_id = ?1 ORDER BY seq DESC LIMIT 1",
                    params![exec_id],
                    |r| r.get(0),
                )
                .optional()
                .doing("ending cut recordings")?;
            let seconds = last.as_deref().and_then(last_event_seconds).unwrap_or(0.0);
            let marker = if *truncated {
                String::new()
            } else {
                let data = serde_json::to_string(CUT_MARKER).unwrap_or_default();
                format!("[{seconds:.6}, \"m\", {data}]\n")
            };
            tx.execute(
                "UPDATE recordings SET ended_at = ?2, size = size + ?3 WHERE exec_id = ?1",
                params![
                    exec_id,
                    started_at + seconds.ceil() as i64,
                    marker.len() as i64
                ],
            )
            .doing("ending cut recordings")?;
            if !marker.is_empty() {
                tx.execute(
                    "INSERT INTO recording_chunks (exec_id, seq, text)
                     VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM recording_chunks
                                  WHERE exec_id = ?1), ?2)",
                    params![exec_id, marker],
                )
                .doing("ending cut recordings")?;
            }
        }
        tx.commit().doing("ending cut recordings")?;
        Ok(open.len())
    }

    /// Deletes the recordings that ended before `cutoff` (Unix seconds), rows and chunks, and
    /// chunks of no recording; returns how many recordings went. One never ended (its session
    /// open, or its server stopped first) counts as ended a day after it began: no terminal's
    /// lease is longer, so a session still open is never swept from under its writer.
    pub(crate) fn sweep_recordings(&self, cutoff: u64) -> Result<usize, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("sweeping recordings")?;
        let gone = tx
            .execute(
                "DELETE FROM recordings WHERE COALESCE(ended_at, started_at + 86400) < ?1",
                params![cutoff as i64],
            )
            .doing("sweeping recordings")?;
        tx.execute(
            "DELETE FROM recording_chunks
             WHERE exec_id NOT IN (SELECT exec_id FROM recordings)",
            params![],
        )
        .doing("sweeping recordings")?;
        tx.commit().doing("sweeping recordings")?;
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, started_at: u64) -> RecordingEntry {
        RecordingEntry {
            exec_id: id.into(),
            context_id: "ec_1".into(),
            context_name: "box".into(),
            opened_by: "ana".into(),
            started_at,
            ended_at: None,
            size: 0,
            records_input: false,
            truncated: false,
        }
    }

    #[test]
    fn a_recording_a_killed_server_left_open_ends_at_its_last_event_with_a_marker() {
        for fresh in super::super::tests::stores("cut_recordings") {
            let store = &fresh.store;
            store
                .write_recordings(&[entry("ex_cut", 1000), entry("ex_done", 1000)], &[])
                .unwrap();
            let lines = "{\"version\": 2}\n[0.5, \"o\", \"a\"]\n[2.25, \"o\", \"b\"]\n";
            let appends = [
                RecordingAppend {
                    exec_id: "ex_cut".into(),
                    text: lines.into(),
                    truncated: false,
                    ended_at: None,
                },
                RecordingAppend {
                    exec_id: "ex_done".into(),
                    text: lines.into(),
                    truncated: false,
                    ended_at: Some(1001),
                },
            ];
            store.write_recordings(&[], &appends).unwrap();
            assert_eq!(store.end_cut_recordings().unwrap(), 1, "only the open one");
            let row = store.recording("ex_cut").unwrap().unwrap();
            assert_eq!(
                row.ended_at,
                Some(1003),
                "started at 1000, last event at 2.25 s"
            );
            let text = store.recording_text("ex_cut").unwrap();
            assert!(
                text.ends_with(&format!("[2.250000, \"m\", \"{CUT_MARKER}\"]\n")),
                "{text}"
            );
            assert_eq!(row.size as usize, text.len());
            assert_eq!(
                store.recording_text("ex_done").unwrap(),
                lines,
                "an ended one is left"
            );
            assert_eq!(store.end_cut_recordings().unwrap(), 0, "once");
        }
    }

    #[test]
    fn a_recording_is_appended_in_chunks_read_whole_and_swept_once_ended_long_enough() {
        for fresh in super::super::tests::stores("recordings") {
            let store = &fresh.store;
            store
                .write_recordings(&[entry("ex_old", 100), entry("ex_new", 500_000)], &[])
                .unwrap();
            let append = |id: &str, text: &str, ended_at| RecordingAppend {
                exec_id: id.into(),
                text: text.into(),
                truncated: false,
                ended_at,
            };
            let both = [
                append("ex_new", "head\n", None),
                append("ex_old", "x\n", Some(200)),
            ];
            store.write_recordings(&[], &both).unwrap();
            let end = [append("ex_new", "[1.0, \"o\", \"a\"]\n", Some(500_010))];
            store.write_recordings(&[], &end).unwrap();
            // An append to no recording stores nothing.
            let stray = [append("ex_none", "lost\n", None)];
            store.write_recordings(&[], &stray).unwrap();
            assert_eq!(store.recording_text("ex_none").unwrap(), "");
            assert_eq!(
                store.recording_text("ex_new").unwrap(),
                "head\n[1.0, \"o\", \"a\"]\n"
            );
            let row = store.recording("ex_new").unwrap().unwrap();
            assert_eq!((row.size, row.ended_at), (21, Some(500_010)));
            let listed = store.recordings(Some("ana"), None, 10).unwrap();
            assert_eq!(listed.len(), 2);
            assert_eq!(listed[0].exec_id, "ex_new", "newest first");
            assert!(store.recordings(Some("bo"), None, 10).unwrap().is_empty());
            assert!(store.recordings(None, Some("ec_2"), 10).unwrap().is_empty());
            assert_eq!(store.sweep_recordings(1000).unwrap(), 1, "ended at 200");
            assert_eq!(store.recording("ex_old").unwrap(), None);
            assert_eq!(store.recording_text("ex_old").unwrap(), "");
            assert!(store.recording("ex_new").unwrap().is_some());
            // One never ended counts as ended a day after it began.
            store
                .write_recordings(&[entry("ex_open", 600_000)], &[])
                .unwrap();
            assert_eq!(
                store.sweep_recordings(600_000 + 86_399).unwrap(),
                1,
                "ex_new only"
            );
            assert!(store.recording("ex_open").unwrap().is_some());
            assert_eq!(store.sweep_recordings(600_000 + 86_401).unwrap(), 1);
        }
    }
}
