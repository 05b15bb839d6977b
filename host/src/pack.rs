//! Packing a capability folder into the inline form a `run.request` carries (PROTOCOL §4.3):
//! the manifest's text and every other regular file, base64url.
//!
//! This module owns what may leave the machine in a pack: regular files under the folder,
//! nothing else. It never follows a symlink, never packs a file outside the folder, and never
//! packs past [`MAX_INLINE_BYTES`] inline or [`MAX_BUNDLE_BYTES`] as a bundle ([`pack_bundle`]).

use std::path::{Path, PathBuf};

use outpost_core::manifest::{MANIFEST_FILE, Manifest};
use outpost_core::wire::{
    CapabilitySource, InlineFile, MAX_BUNDLE_BYTES, bundle_digest, encode_bundle,
};

/// The most bytes (manifest and files, before base64) an inline capability may hold; larger
/// ones travel as a bundle by digest.
pub const MAX_INLINE_BYTES: u64 = 512 * 1024;

/// Why a folder could not be packed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The manifest or file inside the capability folder that could not be read.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The manifest does not validate.
    #[error("{}: {source}", path.display())]
    Manifest {
        /// The manifest's path.
        path: PathBuf,
        /// What is wrong with it.
        source: outpost_core::manifest::ManifestError,
    },
    /// A symlink, socket or device inside the folder.
    #[error("{} is not a regular file or folder; a capability packs only those (copy the file in instead of linking it)", path.display())]
    NotRegular {
        /// The symlink, socket or device found inside the folder.
        path: PathBuf,
    },
    /// A path inside the folder is not UTF-8.
    #[error("{} is not a UTF-8 path; rename it", path.display())]
    NotUtf8 {
        /// The path inside the folder whose name is not UTF-8, as the OS gave it.
        path: PathBuf,
    },
    /// The folder holds more than [`MAX_INLINE_BYTES`] (send it as a bundle,
    /// [`pack_bundle`]).
    #[error(
        "the capability holds {size} bytes, more than the {MAX_INLINE_BYTES} an inline capability may carry; send it as a bundle"
    )]
    TooLarge {
        /// Its size.
        size: u64,
    },
    /// The folder's bundle would exceed [`MAX_BUNDLE_BYTES`].
    #[error(
        "the capability's bundle holds more than {MAX_BUNDLE_BYTES} bytes; remove what the run does not need"
    )]
    BundleTooLarge,
}

impl PackError {
    /// The stable code (`capability_unreadable`, `invalid_manifest`, `capability_too_large`, …).
    pub fn code(&self) -> &'static str {
        match self {
            PackError::Read { .. } => "capability_unreadable",
            PackError::Manifest { .. } => "invalid_manifest",
            PackError::NotRegular { .. } => "capability_not_regular",
            PackError::NotUtf8 { .. } => "path_not_utf8",
            PackError::TooLarge { .. } => "capability_too_large",
            PackError::BundleTooLarge => "bundle_too_large",
        }
    }
}

/// The folder `dir` packed inline, with its validated manifest. Files are listed in path
/// order, so the same folder always packs to the same bytes.
pub fn pack_capability(dir: &Path) -> Result<(CapabilitySource, Manifest), PackError> {
    pack_within(dir, MAX_INLINE_BYTES)
}

/// The folder `dir` packed as a bundle (PROTOCOL §11.4), for a capability too large to send
/// inline: its bytes, their lowercase hex SHA-256, and the validated manifest.
pub fn pack_bundle(dir: &Path) -> Result<(Vec<u8>, String, Manifest), PackError> {
    // Base64 grows the files by a third: what packs within 3/4 of the limit may fit.
    let (source, manifest) = pack_within(dir, MAX_BUNDLE_BYTES / 4 * 3).map_err(|e| match e {
        PackError::TooLarge { .. } => PackError::BundleTooLarge,
        other => other,
    })?;
    let CapabilitySource::Inline {
        manifest: text,
        files,
    } = source
    else {
        return Err(PackError::BundleTooLarge);
    };
    let bytes = encode_bundle(&text, &files);
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(PackError::BundleTooLarge);
    }
    let sha256 = bundle_digest(&bytes);
    Ok((bytes, sha256, manifest))
}

fn pack_within(dir: &Path, limit: u64) -> Result<(CapabilitySource, Manifest), PackError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest_path).map_err(|source| PackError::Read {
        path: manifest_path.clone(),
        source,
    })?;
    let manifest = Manifest::parse(&text).map_err(|source| PackError::Manifest {
        path: manifest_path.clone(),
        source,
    })?;
    let mut found = Vec::new();
    walk(dir, dir, &mut found)?;
    found.sort();
    let mut size = text.len() as u64;
    let mut files = Vec::with_capacity(found.len());
    for (relative, path) in found {
        if relative == MANIFEST_FILE {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|source| PackError::Read {
            path: path.clone(),
            source,
        })?;
        size += bytes.len() as u64;
        if size > limit {
            return Err(PackError::TooLarge { size });
        }
        files.push(InlineFile {
            path: relative,
            content_b64: outpost_core::b64::encode(&bytes),
        });
    }
    if size > limit {
        return Err(PackError::TooLarge { size });
    }
    Ok((
        CapabilitySource::Inline {
            manifest: text,
            files,
        },
        manifest,
    ))
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, PathBuf)>) -> Result<(), PackError> {
    let read = |path: &Path, source| PackError::Read {
        path: path.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(|e| read(dir, e))? {
        let entry = entry.map_err(|e| read(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| read(&path, e))?;
        if kind.is_dir() {
            walk(root, &path, found)?;
        } else if kind.is_file() {
            let relative = path
                .strip_prefix(root)
                .ok()
                .and_then(Path::to_str)
                .ok_or_else(|| PackError::NotUtf8 { path: path.clone() })?
                .to_owned();
            found.push((relative, path));
        } else {
            return Err(PackError::NotRegular { path });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &[u8])]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "outpost-pack-{}-{}",
            std::process::id(),
            files.len() * 7 + files.first().map_or(0, |f| f.1.len())
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, bytes) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        dir
    }

    const MANIFEST: &[u8] =
        b"name: t\nversion: 1\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";

    #[test]
    fn a_folder_packs_its_files_in_order_and_unpacks_to_the_same_bytes() {
        let dir = folder(&[
            ("manifest.yaml", MANIFEST),
            ("run.sh", b"echo hi\n"),
            ("lib/a.txt", b"\x00\xff"),
        ]);
        let (source, manifest) = pack_capability(&dir).unwrap();
        assert_eq!(manifest.entry, "run.sh");
        let CapabilitySource::Inline { files, .. } = source else {
            panic!("inline")
        };
        let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["lib/a.txt", "run.sh"]);
        assert_eq!(
            outpost_core::b64::decode(&files[0].content_b64).unwrap(),
            b"\x00\xff"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn links_oversized_folders_and_bad_manifests_are_refused_with_codes() {
        let dir = folder(&[("manifest.yaml", MANIFEST), ("run.sh", b"x")]);
        std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).unwrap();
        assert_eq!(
            pack_capability(&dir).unwrap_err().code(),
            "capability_not_regular"
        );
        std::fs::remove_file(dir.join("passwd")).unwrap();
        std::fs::write(dir.join("big"), vec![0u8; MAX_INLINE_BYTES as usize]).unwrap();
        assert_eq!(
            pack_capability(&dir).unwrap_err().code(),
            "capability_too_large"
        );
        std::fs::write(dir.join("manifest.yaml"), "name: [").unwrap();
        assert_eq!(
            pack_capability(&dir).unwrap_err().code(),
            "invalid_manifest"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
