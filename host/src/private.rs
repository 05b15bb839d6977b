//! State databases private to their owner. SQLite creates a database file with mode 0644 less
//! the umask, and gives the `-wal`, `-shm` and `-journal` files it makes later the mode of the
//! database file; so a database made here is created 0600 before SQLite opens it, and one an
//! older version left readable to others is tightened, with its companions. This module never
//! opens the database itself and never loosens a mode.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The files SQLite keeps beside the database `path`.
fn companions(path: &Path) -> [PathBuf; 3] {
    ["-wal", "-shm", "-journal"].map(|suffix| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// Creates the database file `path` with mode 0600 if it does not exist, and takes every
/// group and other permission off it and off its `-wal`, `-shm` and `-journal` files where
/// they exist. Call it before SQLite opens `path`.
pub fn private_database(path: &Path) -> std::io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let [wal, shm, journal] = companions(path);
    for file in [path.to_path_buf(), wal, shm, journal] {
        let mode = match fs::metadata(&file) {
            Ok(meta) => meta.permissions().mode(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if mode & 0o077 != 0 {
            fs::set_permissions(&file, fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_database_is_made_0600_and_an_old_one_is_tightened_with_its_companions() {
        let dir = std::env::temp_dir().join(format!("outpost-private-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let db = dir.join("new.db");
        private_database(&db).unwrap();
        assert_eq!(mode(&db), 0o600);

        let old = dir.join("old.db");
        let [wal, shm, _] = companions(&old);
        for file in [&old, &wal, &shm] {
            fs::write(file, b"").unwrap();
            fs::set_permissions(file, fs::Permissions::from_mode(0o644)).unwrap();
        }
        private_database(&old).unwrap();
        for file in [&old, &wal, &shm] {
            assert_eq!(mode(file), 0o600, "{}", file.display());
        }
        // Never loosened: a file readable by its owner only stays as it is.
        fs::set_permissions(&old, fs::Permissions::from_mode(0o400)).unwrap();
        private_database(&old).unwrap();
        assert_eq!(mode(&old), 0o400);
        fs::remove_dir_all(&dir).unwrap();
    }
}
