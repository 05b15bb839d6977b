//! What the machine owner's own commands (`outpost context commands on|off`) use to speak for
//! the machine while its daemon may be running: the joined server from `server.json` and a
//! client signing with the machine key, unsealed as the daemon unseals it. Nothing here takes
//! the daemon's lock or writes a file.

use std::path::Path;

use outpost_host::OwnerFolders;

use super::DaemonError;
use super::home::{SERVER_FILE, ServerFile};
use outpost_adapters::http::SignedClient;
use outpost_adapters::tls::{ServerUrl, Trust};

/// A client signing as this machine for the server it joined.
pub fn machine_client(
    folders: &OwnerFolders,
    passphrase: Option<&str>,
    ca_file: Option<&Path>,
) -> Result<SignedClient, DaemonError> {
    let path = folders.config.join(SERVER_FILE);
    let saved: ServerFile = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| DaemonError::BadServerFile {
            path: path.clone(),
            reason: e.to_string(),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DaemonError::NotJoined),
        Err(e) => return Err(DaemonError::home(&path, e)),
    };
    let seed = super::key::machine_seed(&folders.config, passphrase)?;
    let trust = Trust::from_option(ca_file)?
        .pinning(saved.tls_sha256.as_deref())
        .pinning_all(saved.tls_pins.iter().map(String::as_str));
    let alternates = saved
        .urls
        .iter()
        .map(|u| ServerUrl::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SignedClient::new(ServerUrl::parse(&saved.url)?, seed, &trust).with_alternates(alternates))
}
