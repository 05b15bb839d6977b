//! One way to speak to either database the store keeps its state in: SQLite (one file in the
//! state folder, the default) or PostgreSQL (`--database postgres://…`, shared by the nodes of a
//! cluster).
//!
//! The store writes each query once, in the SQL both databases read, with `?N` placeholders;
//! this module owns the connections, turns the placeholders into PostgreSQL's `$N`, keeps each
//! connection's prepared statements, and moves values both ways as the four kinds both store:
//! integers, text, bytes and null. It never decides what a query means.
//!
//! The store's calls are synchronous (the dispatcher commits its records before it carries out
//! the outputs that depend on them, and routes read as they need). A PostgreSQL connection is
//! driven by a small runtime of its own; a call waits for its answer on the caller's thread, off
//! the caller's runtime when it has one (as a SQLite call waits for the disk).

use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;

use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

/// What a database call failed with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DbError {
    /// SQLite refused or failed.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused or failed (or its connection is gone).
    #[error("{}", postgres_message(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A query that must return a row returned none.
    #[error("the query returned no rows")]
    NoRows,
    /// A column held another kind of value than the store reads from it.
    #[error("column {index} holds {found}, not {wanted}")]
    Kind {
        index: usize,
        found: &'static str,
        wanted: &'static str,
    },
    /// The connection's driver stopped (the store is closing).
    #[error("the database connection's driver stopped")]
    DriverGone,
    /// The URL's TLS settings (`sslmode`, `sslrootcert`) cannot be honoured as asked.
    #[error("{0}")]
    Tls(String),
}

/// What PostgreSQL said (its message, detail and SQLSTATE code), not only "db error".
fn postgres_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => {
            // The cause says what went wrong underneath (a TLS handshake: which certificate
            // check failed), with what to do about a certificate.
            let mut text = e.to_string();
            let cause = std::error::Error::source(e).map(ToString::to_string);
            if let Some(cause) = cause.filter(|c| !text.contains(c.as_str())) {
                text.push_str(": ");
                text.push_str(&cause);
                if cause.contains("certificate") {
                    text.push_str(
                        " (name the database's CA with sslrootcert=FILE in the URL, PEM)",
                    );
                }
            }
            text
        }
    }
}

/// A value as both databases store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Int(_) => "an integer",
            Self::Text(_) => "text",
            Self::Bytes(_) => "bytes",
        }
    }
}

/// A Rust value the store passes as a query parameter.
pub(crate) trait ToValue {
    /// The value as stored.
    fn to_value(&self) -> Value;
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
}

impl ToValue for u32 {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Bytes(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Bytes(self.clone())
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// A Rust value the store reads from a column.
pub(crate) trait FromValue: Sized {
    /// The Rust value, or what the column held instead.
    fn from_value(value: &Value) -> Result<Self, &'static str>;
    /// What this reads, for the error.
    const WANTED: &'static str;
}

impl FromValue for i64 {
    const WANTED: &'static str = "an integer";
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(i) => Ok(*i),
            other => Err(other.kind()),
        }
    }
}

impl FromValue for u32 {
    const WANTED: &'static str = "an integer from 0 to 4294967295";
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(i) => u32::try_from(*i).map_err(|_| "an integer out of range"),
            other => Err(other.kind()),
        }
    }
}

impl FromValue for bool {
    const WANTED: &'static str = "0 or 1";
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int(i) => Ok(*i != 0),
            other => Err(other.kind()),
        }
    }
}

impl FromValue for String {
    const WANTED: &'static str = "text";
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Text(t) => Ok(t.clone()),
            other => Err(other.kind()),
        }
    }
}

impl FromValue for Vec<u8> {
    const WANTED: &'static str = "bytes";
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Bytes(b) => Ok(b.clone()),
            other => Err(other.kind()),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    const WANTED: &'static str = T::WANTED;
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row a query returned.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    values: Vec<Value>,
}

impl Row {
    /// Column `index` (from 0) as a `T`.
    pub(crate) fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        let value = self.values.get(index).unwrap_or(&Value::Null);
        T::from_value(value).map_err(|found| DbError::Kind {
            index,
            found,
            wanted: T::WANTED,
        })
    }
}

/// The parameters of one statement: `params![a, b]`.
pub(crate) type Params<'a> = &'a [&'a dyn ToValue];

/// `params![a, b, …]`: a statement's parameters, `?1`, `?2`, … in order.
macro_rules! params {
    () => {
        &[] as $crate::store::db::Params<'_>
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::store::db::ToValue),+] as $crate::store::db::Params<'_>
    };
}
pub(crate) use params;

/// Turns `Err(NoRows)` into `Ok(None)`.
pub(crate) trait OptionalExtension<T> {
    /// The row, or `None` when the query returned none.
    fn optional(self) -> Result<Option<T>, DbError>;
}

impl<T> OptionalExtension<T> for Result<T, DbError> {
    fn optional(self) -> Result<Option<T>, DbError> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What the store asks of a connection or of a transaction on one.
pub(crate) trait Sql {
    /// Runs one statement; how many rows it changed.
    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize, DbError>;
    /// Runs one query; every row it returned.
    fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, DbError>;
    /// Whether this speaks to PostgreSQL (else SQLite).
    fn is_postgres(&self) -> bool;

    /// The SQL for the database's clock now, in Unix milliseconds (for liveness, which
    /// never compares the nodes' own clocks).
    fn now_ms(&self) -> &'static str {
        if self.is_postgres() {
            POSTGRES_NOW_MS
        } else {
            SQLITE_NOW_MS
        }
    }

    /// The SQL for the next change number of the owners' table (`context_owner.changed`).
    fn next_owner_change(&self) -> &'static str {
        if self.is_postgres() {
            POSTGRES_NEXT_OWNER_CHANGE
        } else {
            SQLITE_NEXT_OWNER_CHANGE
        }
    }

    /// The first row `sql` returns, read by `read`; [`DbError::NoRows`] when there is none.
    fn query_row<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        read: impl FnOnce(&Row) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let rows = self.query(sql, params)?;
        rows.first().ok_or(DbError::NoRows).and_then(read)
    }

    /// Every row `sql` returns, each read by `read`.
    fn query_map<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        read: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        self.query(sql, params)?.iter().map(read).collect()
    }
}

/// A connection to either database.
pub(crate) enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(PgConn),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sqlite(_) => "Conn::Sqlite",
            Self::Postgres(_) => "Conn::Postgres",
        })
    }
}

impl Conn {
    /// Starts a transaction: committed by [`Tx::commit`], rolled back when dropped without.
    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, DbError> {
        match self {
            Self::Sqlite(c) => Ok(Tx::Sqlite(c.transaction()?)),
            Self::Postgres(c) => {
                c.begin()?;
                Ok(Tx::Postgres(PgTx { conn: c }))
            }
        }
    }
}

impl Sql for Conn {
    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize, DbError> {
        match self {
            Self::Sqlite(c) => sqlite_execute(c, sql, params),
            Self::Postgres(c) => c.execute(sql, params),
        }
    }

    fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, DbError> {
        match self {
            Self::Sqlite(c) => sqlite_query(c, sql, params),
            Self::Postgres(c) => c.query(sql, params),
        }
    }

    fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// SQLite's next owner change number: one more than the largest (an index lookup; its one
/// writer makes it safe).
const SQLITE_NEXT_OWNER_CHANGE: &str = "(SELECT COALESCE(MAX(changed), 0) + 1 FROM context_owner)";
/// PostgreSQL's next owner change number: its sequence (migration 19).
const POSTGRES_NEXT_OWNER_CHANGE: &str = "nextval('context_owner_changes')";

/// SQLite's clock in Unix milliseconds.
const SQLITE_NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
/// PostgreSQL's clock in Unix milliseconds (the time of the statement's call, not of its
/// transaction's start).
const POSTGRES_NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

/// A transaction on a [`Conn`]: committed by [`Tx::commit`], rolled back when dropped
/// without.
pub(crate) enum Tx<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres(PgTx<'a>),
}

/// A PostgreSQL transaction in progress: open until its connection's `COMMIT` or `ROLLBACK`.
pub(crate) struct PgTx<'a> {
    conn: &'a PgConn,
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if self.conn.in_transaction.get() {
            // Best effort: a failed ROLLBACK means the connection is gone, which ends the
            // transaction as well.
            let _ = self.conn.end("ROLLBACK");
        }
    }
}

impl Tx<'_> {
    /// Commits what the transaction wrote.
    pub(crate) fn commit(self) -> Result<(), DbError> {
        match self {
            Self::Sqlite(tx) => Ok(tx.commit()?),
            // Ended by the COMMIT, or rolled back by PostgreSQL when it fails.
            Self::Postgres(tx) => tx.conn.end("COMMIT"),
        }
    }

    /// Runs statements without parameters inside the transaction (migrations).
    pub(crate) fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Self::Sqlite(tx) => Ok(tx.execute_batch(sql)?),
            Self::Postgres(tx) => tx.conn.batch(sql),
        }
    }
}

impl Sql for Tx<'_> {
    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize, DbError> {
        match self {
            Self::Sqlite(tx) => sqlite_execute(tx, sql, params),
            Self::Postgres(tx) => tx.conn.execute(sql, params),
        }
    }

    fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, DbError> {
        match self {
            Self::Sqlite(tx) => sqlite_query(tx, sql, params),
            Self::Postgres(tx) => tx.conn.query(sql, params),
        }
    }

    fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

// --- SQLite ---------------------------------------------------------------------------------

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Self::Null => ValueRef::Null,
            Self::Int(i) => ValueRef::Integer(*i),
            Self::Text(t) => ValueRef::Text(t.as_bytes()),
            Self::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

fn values(params: Params<'_>) -> Vec<Value> {
    params.iter().map(|p| p.to_value()).collect()
}

fn sqlite_execute(
    conn: &rusqlite::Connection,
    sql: &str,
    params: Params<'_>,
) -> Result<usize, DbError> {
    let values = values(params);
    Ok(conn
        .prepare_cached(sql)?
        .execute(rusqlite::params_from_iter(values.iter()))?)
}

fn sqlite_query(
    conn: &rusqlite::Connection,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, DbError> {
    use rusqlite::types::ValueRef;
    let values = values(params);
    let mut stmt = conn.prepare_cached(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(match row.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(i) => Value::Int(i),
                // The store keeps no floating-point columns; a REAL is an aggregate's whole
                // number.
                ValueRef::Real(f) => Value::Int(f as i64),
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
            });
        }
        out.push(Row { values });
    }
    Ok(out)
}

// --- PostgreSQL -----------------------------------------------------------------------------

/// A PostgreSQL connection: its client (made again when the connection was lost, outside a
/// transaction), the runtime that drives its socket, and its prepared statements (by the
/// store's SQL text).
pub(crate) struct PgConn {
    url: String,
    driver: tokio::runtime::Handle,
    client: RefCell<tokio_postgres::Client>,
    statements: RefCell<HashMap<String, tokio_postgres::Statement>>,
    /// A transaction is open: a lost connection fails it rather than being made again inside
    /// it.
    in_transaction: std::cell::Cell<bool>,
}

/// How long a connection may take to open, and how long a database may leave a sent request
/// unacknowledged or a connection silent before the connection counts as lost, unless the URL
/// sets them (`connect_timeout`, `tcp_user_timeout`, `keepalives_idle`): without them a
/// database that vanished without closing its sockets would hold a call for minutes.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// `url`'s connection settings, with the bounds above where it sets none, and how the
/// connection is secured (see [`tls_of`]).
pub(crate) fn bounded_config(url: &str) -> Result<(tokio_postgres::Config, Tls), DbError> {
    let (url, tls) = tls_of(url)?;
    let mut config: tokio_postgres::Config = url.parse()?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(SEND_TIMEOUT);
    }
    if !url.contains("keepalives_idle") {
        config.keepalives_idle(KEEPALIVE_IDLE);
        config.keepalives_interval(std::time::Duration::from_secs(2));
        config.keepalives_retries(3);
    }
    config.ssl_mode(tls.mode);
    Ok((config, tls))
}

/// How a connection to PostgreSQL is secured: plain TCP or a Unix socket, or TLS whose server
/// certificate is always verified (rustls).
pub(crate) struct Tls {
    mode: tokio_postgres::config::SslMode,
    /// The connector: used only when `mode` asks for TLS.
    pub(crate) connector: tokio_postgres_rustls::MakeRustlsConnect,
}

/// The URL's `sslmode` and `sslrootcert`, taken out of it (the PostgreSQL client library reads
/// neither as libpq does):
///
/// - none, or `disable`: no TLS (a local socket, a private network);
/// - `require`, `verify-ca` or `verify-full`: TLS, the server's certificate verified — against
///   `sslrootcert=FILE` (PEM) and the public web roots, or the public roots alone — and its
///   name or address checked, whichever of the three is named (libpq's `require` would not
///   verify: here nothing is less than `verify-full`);
/// - `prefer` and `allow` are refused: they fall back to plain text when TLS fails.
fn tls_of(url: &str) -> Result<(String, Tls), DbError> {
    use tokio_postgres::config::SslMode;
    let bad = |what: String| DbError::Tls(what);
    let (mut mode, mut root_file) = (None, None);
    let mut take = |key: &str, value: String| match key {
        "sslmode" => mode = Some(value),
        "sslrootcert" => root_file = Some(value),
        _ => {}
    };
    let rest = if url.contains("://") {
        // A URL: the two are query parameters (their values percent-encoded).
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let percent_decoded = |v: &str| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                let ours = matches!(key, "sslmode" | "sslrootcert");
                if ours {
                    take(key, percent_decoded(value));
                }
                !ours && !pair.is_empty()
            })
            .collect();
        match kept.is_empty() {
            true => base.to_owned(),
            false => format!("{base}?{}", kept.join("&")),
        }
    } else {
        // Key=value words (`host=/run/postgresql dbname=outpost`).
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|word| {
                let (key, value) = word.split_once('=').unwrap_or((word, ""));
                let ours = matches!(key, "sslmode" | "sslrootcert");
                if ours {
                    take(key, value.to_owned());
                }
                !ours
            })
            .collect();
        kept.join(" ")
    };
    let mode = match mode.as_deref() {
        None | Some("disable") => SslMode::Disable,
        Some("require" | "verify-ca" | "verify-full") => SslMode::Require,
        Some(other @ ("prefer" | "allow")) => {
            return Err(bad(format!(
                "sslmode={other} falls back to plain text when TLS fails: use sslmode=verify-full (TLS, the server's certificate verified; sslrootcert=FILE names its CA) or sslmode=disable"
            )));
        }
        Some(other) => {
            return Err(bad(format!(
                "sslmode={other} is not a mode: use verify-full (or require, verify-ca: each verifies the certificate here) or disable"
            )));
        }
    };
    if root_file.is_some() && mode == SslMode::Disable {
        return Err(bad(
            "sslrootcert is given without TLS: add sslmode=verify-full".to_owned(),
        ));
    }
    let trust = match &root_file {
        Some(file) => outpost_adapters::tls::Trust::with_ca_file(std::path::Path::new(file))
            .map_err(|e| bad(e.to_string()))?,
        None => outpost_adapters::tls::Trust::public(),
    };
    let config = std::sync::Arc::unwrap_or_clone(trust.client_config());
    Ok((
        rest,
        Tls {
            mode,
            connector: tokio_postgres_rustls::MakeRustlsConnect::new(config),
        },
    ))
}

/// A new client for `url`, its connection driven by `driver`.
fn open_client(
    url: &str,
    driver: &tokio::runtime::Handle,
) -> Result<tokio_postgres::Client, DbError> {
    let (config, tls) = bounded_config(url)?;
    let opened = driver.spawn(async move {
        let (client, connection) = config.connect(tls.connector).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "a database connection ended");
            }
        });
        Ok::<_, DbError>(client)
    });
    wait(opened).map_err(|_| DbError::DriverGone)?
}

impl PgConn {
    /// Connects to `url` with `driver` running the socket.
    pub(crate) fn connect(url: &str, driver: &Driver) -> Result<Self, DbError> {
        let handle = driver.handle()?;
        Ok(Self {
            client: RefCell::new(open_client(url, &handle)?),
            url: url.to_owned(),
            driver: handle,
            statements: RefCell::new(HashMap::new()),
            in_transaction: std::cell::Cell::new(false),
        })
    }

    /// Makes the connection again when it was lost (the database restarted, a network cut)
    /// and no transaction is open; an error when it cannot.
    fn reconnect_if_lost(&self) -> Result<(), DbError> {
        if self.in_transaction.get() || !self.client.borrow().is_closed() {
            return Ok(());
        }
        let client = open_client(&self.url, &self.driver)?;
        tracing::info!("made a lost database connection again");
        *self.client.borrow_mut() = client;
        self.statements.borrow_mut().clear();
        Ok(())
    }

    fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.reconnect_if_lost()?;
        Ok(wait(self.client.borrow().batch_execute(sql))?)
    }

    fn begin(&self) -> Result<(), DbError> {
        self.batch("BEGIN")?;
        self.in_transaction.set(true);
        Ok(())
    }

    fn end(&self, sql: &str) -> Result<(), DbError> {
        self.in_transaction.set(false);
        Ok(wait(self.client.borrow().batch_execute(sql))?)
    }

    fn statement(&self, sql: &str) -> Result<tokio_postgres::Statement, DbError> {
        self.reconnect_if_lost()?;
        if let Some(stmt) = self.statements.borrow().get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = wait(self.client.borrow().prepare(&dollar_placeholders(sql)))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }

    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize, DbError> {
        let stmt = self.statement(sql)?;
        let values = values(params);
        let refs: Vec<&(dyn ToSql + Sync)> =
            values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let n = wait(self.client.borrow().execute(&stmt, &refs))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, DbError> {
        let stmt = self.statement(sql)?;
        let values = values(params);
        let refs: Vec<&(dyn ToSql + Sync)> =
            values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let rows = wait(self.client.borrow().query(&stmt, &refs))?;
        rows.iter()
            .map(|row| {
                let values = (0..row.len())
                    .map(|i| row.try_get::<_, Value>(i))
                    .collect::<Result<_, _>>()?;
                Ok(Row { values })
            })
            .collect()
    }
}

/// The runtime that drives the PostgreSQL connections' sockets (one thread), so that the
/// store's synchronous calls work from any thread, inside a runtime or not.
pub(crate) struct Driver {
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

impl Driver {
    /// Starts the driver's thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("outpost-database")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// A handle that spawns on the driver (an error once it stopped).
    fn handle(&self) -> Result<tokio::runtime::Handle, DbError> {
        Ok(self
            .runtime
            .as_ref()
            .ok_or(DbError::DriverGone)?
            .handle()
            .clone())
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which a runtime's own thread must not; this does not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Waits for `work` on this thread (off the runtime, when it is one's worker).
fn wait<F: Future>(work: F) -> F::Output {
    super::off_the_runtime(|| futures_executor::block_on(work))
}

/// `sql` with its `?N` placeholders written `$N`, string literals and quoted names left alone.
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '?' => {
                out.push('$');
                continue;
            }
            None => {}
        }
        out.push(c);
    }
    out
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Self::Null => Ok(IsNull::Yes),
            Self::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => Err(format!("an integer for a parameter of type {ty}").into()),
            },
            // PostgreSQL's text holds no NUL: stored as U+FFFD, as invalid UTF-8 in output
            // already is (identifiers never hold one: the API refuses control characters in
            // paths and queries).
            Self::Text(t) if !is_text(ty) => {
                Err(format!("text for a parameter of type {ty}").into())
            }
            Self::Text(t) if t.contains('\0') => t.replace('\0', "\u{FFFD}").to_sql(ty, out),
            Self::Text(t) => t.to_sql(ty, out),
            Self::Bytes(_) if *ty != Type::BYTEA => {
                Err(format!("bytes for a parameter of type {ty}").into())
            }
            Self::Bytes(b) => b.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Whether PostgreSQL's type `ty` holds text.
fn is_text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
    )
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(match *ty {
            Type::INT8 => Self::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Self::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT2 => Self::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::BOOL => Self::Int(i64::from(bool::from_sql(ty, raw)?)),
            Type::BYTEA => Self::Bytes(Vec::<u8>::from_sql(ty, raw)?),
            _ if is_text(ty) => Self::Text(String::from_sql(ty, raw)?),
            // The store reads integers, text and bytes only: a query returning anything else
            // (NUMERIC from an uncast SUM, a float) is the query's mistake, said here.
            _ => {
                return Err(format!("a column of type {ty}, which the store does not read").into());
            }
        })
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Self::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            dollar_placeholders("SELECT '?1', \"a?\" FROM t WHERE a = ?1 AND b = ?12"),
            "SELECT '?1', \"a?\" FROM t WHERE a = $1 AND b = $12"
        );
    }

    #[test]
    fn a_value_reads_as_what_it_holds_and_says_what_it_held() {
        let row = Row {
            values: vec![Value::Int(3), Value::Null, Value::Text("x".into())],
        };
        assert_eq!(row.get::<i64>(0).unwrap(), 3);
        assert!(row.get::<bool>(0).unwrap());
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        let err = row.get::<i64>(2).unwrap_err().to_string();
        assert_eq!(err, "column 2 holds text, not an integer");
    }
}

#[cfg(test)]
mod tls_tests {
    use super::tls_of;
    use tokio_postgres::config::SslMode;

    fn ca_file(name: &str) -> std::path::PathBuf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let path = std::env::temp_dir().join(format!("outpost-{name}-{}.pem", std::process::id()));
        std::fs::write(&path, cert.pem()).unwrap();
        path
    }

    #[test]
    fn the_urls_tls_settings_are_taken_out_and_nothing_less_than_verified_tls_is_accepted() {
        let mode = |url: &str| tls_of(url).map(|(rest, tls)| (rest, tls.mode));
        let plain = "postgres://outpost@127.0.0.1:5432/outpost";
        assert_eq!(mode(plain).unwrap(), (plain.to_owned(), SslMode::Disable));
        assert_eq!(
            mode(&format!("{plain}?sslmode=disable&application_name=a")).unwrap(),
            (format!("{plain}?application_name=a"), SslMode::Disable)
        );
        let socket = "postgres://outpost@/outpost?host=/run/postgresql";
        assert_eq!(mode(socket).unwrap(), (socket.to_owned(), SslMode::Disable));
        let ca = ca_file("db-ca");
        let encoded = ca.display().to_string().replace('/', "%2F");
        for asked in ["require", "verify-ca", "verify-full"] {
            let url = format!("{plain}?application_name=a&sslmode={asked}&sslrootcert={encoded}");
            assert_eq!(
                mode(&url).unwrap(),
                (format!("{plain}?application_name=a"), SslMode::Require),
                "{asked}"
            );
        }
        assert_eq!(
            mode("host=/run/postgresql dbname=outpost sslmode=verify-full").unwrap(),
            (
                "host=/run/postgresql dbname=outpost".to_owned(),
                SslMode::Require
            )
        );
        for (url, says) in [
            (
                format!("{plain}?sslmode=prefer"),
                "falls back to plain text",
            ),
            (format!("{plain}?sslmode=allow"), "falls back to plain text"),
            (format!("{plain}?sslmode=maybe"), "is not a mode"),
            (format!("{plain}?sslrootcert={encoded}"), "without TLS"),
            (
                format!("{plain}?sslmode=verify-full&sslrootcert=%2Fno%2Fsuch.pem"),
                "/no/such.pem",
            ),
        ] {
            let err = mode(&url)
                .err()
                .unwrap_or_else(|| panic!("{url} is refused"));
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
        let _ = std::fs::remove_file(ca);
    }
}
