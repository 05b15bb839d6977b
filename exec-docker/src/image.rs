//! Images made on this machine, without a registry: a root filesystem laid out from local
//! files, tarred and imported through the Engine API.
//!
//! [`busybox_rootfs`] builds the smallest useful root: one static `busybox` with a link per
//! applet, and the empty folders a container expects. [`import_rootfs`] imports such a tarball
//! under a tag, recording what it was built from in the [`LABEL_SOURCE`] label;
//! [`ensure_busybox_image`] builds it again unless the tag already names exactly that image.
//!
//! An image's identity is checked, not its tag trusted: the label must hold the SHA-256 of the
//! tarball and the config changes, and the image's one layer must be that tarball (the
//! engine's own digest of it), so an image built another way under the same name is replaced.

use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;
use sha2::{Digest as _, Sha256};

/// The label on an image made here: the SHA-256 of its root-filesystem tarball and its config
/// changes ([`source_digest`]).
pub const LABEL_SOURCE: &str = "dev.outpost.image-source";

/// The config every imported image gets: the applets on `PATH`.
const CHANGES: &[&str] = &["ENV PATH=/bin"];

/// What [`ensure_busybox_image`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The tag already named an image built from the same sources.
    Kept,
    /// The tag was missing or named another image; it was built.
    Built,
}

/// Why an image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Reading the local files or writing the tarball failed.
    #[error("building the root filesystem: {0}")]
    Rootfs(#[from] std::io::Error),
    /// The engine could not say what `tag` names (unreachable, or an error other than the
    /// image being missing), so whether it must be built is unknown.
    #[error("inspecting {tag}: {message}")]
    Inspect {
        /// The tag being checked.
        tag: String,
        /// What the engine (or the connection to it) said.
        message: String,
    },
    /// The engine refused the import.
    #[error("importing {tag}: {message}")]
    Import {
        /// The tag being imported.
        tag: String,
        /// What the engine said.
        message: String,
    },
}

/// A tarball of a root filesystem holding the static `busybox` at `busybox` as `/bin/busybox`,
/// a link to it for every applet it lists (`busybox --list`), and empty `/tmp` (mode 1777),
/// `/etc`, `/proc`, `/sys`, `/dev` and `/root`.
pub fn busybox_rootfs(busybox: &Path) -> Result<Vec<u8>, ImageError> {
    let applets = std::process::Command::new(busybox).arg("--list").output()?;
    if !applets.status.success() {
        return Err(std::io::Error::other(format!(
            "{} --list failed with {}",
            busybox.display(),
            applets.status
        ))
        .into());
    }
    let binary = std::fs::read(busybox)?;
    let mut tar = tar::Builder::new(Vec::new());
    for (dir, mode) in [
        ("bin", 0o755),
        ("etc", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("root", 0o700),
        ("tmp", 0o1777),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(mode);
        header.set_size(0);
        tar.append_data(&mut header, dir, std::io::empty())?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o755);
    header.set_size(binary.len() as u64);
    tar.append_data(&mut header, "bin/busybox", binary.as_slice())?;
    for applet in String::from_utf8_lossy(&applets.stdout).split_whitespace() {
        if applet == "busybox" || applet.contains('/') {
            continue;
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        tar.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    Ok(tar.into_inner()?)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What an image imported from `rootfs` is built from, as [`LABEL_SOURCE`] records it: the
/// SHA-256 of the tarball, then of each config change, hashed together (lowercase hex).
pub fn source_digest(rootfs: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(sha256_hex(rootfs));
    for change in CHANGES {
        hasher.update(b"\n");
        hasher.update(change.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Imports a root-filesystem tarball as image `tag` (`repo:tag`), with `PATH` set and the
/// [`LABEL_SOURCE`] label, and checks that the engine now holds exactly that image.
pub async fn import_rootfs(docker: &Docker, tag: &str, rootfs: Vec<u8>) -> Result<(), ImageError> {
    let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    let source = source_digest(&rootfs);
    let layer = sha256_hex(&rootfs);
    let mut changes: Vec<String> = CHANGES.iter().map(|c| (*c).to_owned()).collect();
    changes.push(format!("LABEL {LABEL_SOURCE}={source}"));
    let options = CreateImageOptions {
        from_src: Some("-".to_owned()),
        repo: Some(repo.to_owned()),
        tag: Some(version.to_owned()),
        changes,
        ..CreateImageOptions::default()
    };
    let import_error = |message: String| ImageError::Import {
        tag: tag.to_owned(),
        message,
    };
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_full(rootfs.into())), None);
    while let Some(step) = progress.next().await {
        let step = step.map_err(|e| import_error(e.to_string()))?;
        if let Some(detail) = step.error_detail.and_then(|d| d.message) {
            return Err(import_error(detail));
        }
    }
    match is_built_from(docker, tag, &source, &layer).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(import_error(
            "the engine holds another image under the tag after the import".into(),
        )),
        Err(e) => Err(import_error(format!(
            "the image is missing after the import: {e}"
        ))),
    }
}

/// Whether `tag` names an image labelled with `source` whose one layer is `layer` (the
/// tarball's SHA-256, as the engine computes it on import).
async fn is_built_from(
    docker: &Docker,
    tag: &str,
    source: &str,
    layer: &str,
) -> Result<bool, bollard::errors::Error> {
    let image = docker.inspect_image(tag).await?;
    let labelled = image
        .config
        .as_ref()
        .and_then(|c| c.labels.as_ref())
        .and_then(|labels| labels.get(LABEL_SOURCE))
        .is_some_and(|l| l == source);
    let layers = image.root_fs.and_then(|r| r.layers).unwrap_or_default();
    Ok(labelled && layers == [format!("sha256:{layer}")])
}

/// Makes `tag` from the static busybox at `busybox` unless the engine already has an image
/// built from the same tarball and config under it; an image of another making under that
/// name (an older layout, no `PATH`, a different busybox) is replaced. A tag the engine
/// does not know is built; any other engine error is [`ImageError::Inspect`], never taken
/// for a missing image.
pub async fn ensure_busybox_image(
    docker: &Docker,
    tag: &str,
    busybox: &Path,
) -> Result<Ensured, ImageError> {
    let rootfs = busybox_rootfs(busybox)?;
    let (source, layer) = (source_digest(&rootfs), sha256_hex(&rootfs));
    let kept = match is_built_from(docker, tag, &source, &layer).await {
        Ok(kept) => kept,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => false,
        Err(e) => {
            return Err(ImageError::Inspect {
                tag: tag.to_owned(),
                message: e.to_string(),
            });
        }
    };
    if kept {
        return Ok(Ensured::Kept);
    }
    import_rootfs(docker, tag, rootfs).await?;
    Ok(Ensured::Built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_engine_is_an_error_not_a_missing_image() {
        // A port nothing listens on: the engine cannot be reached.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let docker = Docker::connect_with_http(
            &format!("http://127.0.0.1:{port}"),
            5,
            bollard::API_DEFAULT_VERSION,
        )
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // `true --list` succeeds and lists nothing: a root filesystem with no applets.
        let truth = ["/usr/bin/true", "/bin/true"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("a `true` binary");
        let err = runtime
            .block_on(ensure_busybox_image(&docker, "outpost-test:none", truth))
            .unwrap_err();
        assert!(
            matches!(&err, ImageError::Inspect { tag, .. } if tag == "outpost-test:none"),
            "{err}"
        );
    }
}
