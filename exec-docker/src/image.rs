//! Images made on this machine, without a registry: a root filesystem laid out from local
//! files, tarred and imported through the Engine API.
//!
//! [`busybox_rootfs`] builds the smallest useful root: one static `busybox` with a link per
//! applet, and the empty folders a container expects. [`import_rootfs`] imports such a tarball
//! under a tag; [`ensure_busybox_image`] does both only when the tag is missing.

use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

/// Why an image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Reading the local files or writing the tarball failed.
    #[error("building the root filesystem: {0}")]
    Rootfs(#[from] std::io::Error),
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

/// Imports a root-filesystem tarball as image `tag` (`repo:tag`), with `PATH` set.
pub async fn import_rootfs(docker: &Docker, tag: &str, rootfs: Vec<u8>) -> Result<(), ImageError> {
    let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    let options = CreateImageOptions {
        from_src: Some("-".to_owned()),
        repo: Some(repo.to_owned()),
        tag: Some(version.to_owned()),
        changes: vec!["ENV PATH=/bin".to_owned()],
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
    match docker.inspect_image(tag).await {
        Ok(_) => Ok(()),
        Err(e) => Err(import_error(format!(
            "the image is missing after the import: {e}"
        ))),
    }
}

/// Makes `tag` from the static busybox at `busybox` unless the engine already has it.
pub async fn ensure_busybox_image(
    docker: &Docker,
    tag: &str,
    busybox: &Path,
) -> Result<(), ImageError> {
    if docker.inspect_image(tag).await.is_ok() {
        return Ok(());
    }
    import_rootfs(docker, tag, busybox_rootfs(busybox)?).await
}
