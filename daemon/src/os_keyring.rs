//! The OS keyring as the first wrapper of the machine key: the Secret Service on Linux (over
//! the session D-Bus), the Keychain on macOS, the Credential Manager on Windows, all through
//! the `keyring` crate.
//!
//! The keyring holds a random 32-byte wrapping key under service [`SERVICE`] and a user name
//! that names the daemon's config folder, so two homes on one account never share an entry.
//! A keyring that cannot answer (a headless machine has no session bus; a service may run
//! outside the login session) is reported with what it said, and the caller uses the next
//! wrapper. This module owns only the keyring entry: it never reads or writes a file.

use std::path::Path;

use outpost_core::b64;

/// The keyring service name of every outpost entry.
pub(crate) const SERVICE: &str = "outpost";

/// Set to `off` (or `0`) to skip the OS keyring and go straight to the next wrapper.
pub const KEYRING_VAR: &str = "OUTPOST_KEYRING";

/// Whether the owner switched the keyring off with [`KEYRING_VAR`].
pub(crate) fn switched_off() -> bool {
    matches!(
        std::env::var(KEYRING_VAR).as_deref(),
        Ok("off" | "0" | "false" | "no")
    )
}

/// The entry's user name for the config folder `config`.
pub(crate) fn user_for(config: &Path) -> String {
    let path = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    format!("machine-key:{}", path.display())
}

/// Stores `key` under `user` and reads it back: `Err` says why the keyring did not answer.
pub(crate) fn store(user: &str, key: &[u8; 32]) -> Result<(), String> {
    let entry = entry(user)?;
    entry
        .set_password(&b64::encode(key))
        .map_err(|e| describe(&e))?;
    match load(user) {
        Ok(back) if &back == key => Ok(()),
        Ok(_) => Err("the keyring gave back another key than it was given".into()),
        Err(e) => Err(e),
    }
}

/// The wrapping key stored under `user`.
pub(crate) fn load(user: &str) -> Result<[u8; 32], String> {
    let text = entry(user)?.get_password().map_err(|e| describe(&e))?;
    b64::decode_array::<32>(text.trim())
        .map_err(|e| format!("the keyring entry is not a wrapping key: {e}"))
}

fn entry(user: &str) -> Result<keyring::Entry, String> {
    if cfg!(target_os = "linux")
        && std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none()
        && !std::env::var_os("XDG_RUNTIME_DIR")
            .is_some_and(|dir| Path::new(&dir).join("bus").exists())
    {
        return Err("no session D-Bus: DBUS_SESSION_BUS_ADDRESS is unset and there is no $XDG_RUNTIME_DIR/bus".into());
    }
    keyring::Entry::new(SERVICE, user).map_err(|e| describe(&e))
}

fn describe(e: &keyring::Error) -> String {
    match e {
        keyring::Error::NoEntry => "the keyring holds no outpost entry for this home".into(),
        keyring::Error::NoDefaultStore => match keyring::Entry::store_status() {
            Err(cause) => format!("no keyring store could start: {cause}"),
            Ok(()) => "no keyring store".into(),
        },
        other => other.to_string(),
    }
}
