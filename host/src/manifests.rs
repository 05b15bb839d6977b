//! Parsed manifests remembered by their text, for the process.
//!
//! The same capability is usually run again and again, and every run reads its manifest on
//! the way (the server checks the request, the daemon notes the run and launches it): a YAML
//! parse costs tens of microseconds, a lookup well under one. This module owns that memory
//! and nothing else: it never changes what [`Manifest::parse`] decides, it only avoids doing
//! the same parse twice. A text that does not read is not remembered (it is parsed again each
//! time, and gives the same error).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use outpost_core::manifest::{Manifest, ManifestError};

/// The most manifests remembered; past it the memory starts again.
const REMEMBERED_MAX: usize = 256;

/// The longest manifest text remembered: longer ones (rare, and costlier to keep) are
/// parsed each time.
const TEXT_MAX: usize = 16 * 1024;

fn memory() -> &'static Mutex<HashMap<String, Manifest>> {
    static MEMORY: OnceLock<Mutex<HashMap<String, Manifest>>> = OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// [`Manifest::parse`], remembering what it gave for `text`: the same result, faster the
/// second time. Safe to call from any thread.
pub fn parse_manifest(text: &str) -> Result<Manifest, ManifestError> {
    if text.len() > TEXT_MAX {
        return Manifest::parse(text);
    }
    let lock = || memory().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = lock().get(text) {
        return Ok(known.clone());
    }
    let parsed = Manifest::parse(text)?;
    let mut memory = lock();
    if memory.len() >= REMEMBERED_MAX {
        memory.clear();
    }
    memory.insert(text.to_owned(), parsed.clone());
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: hello\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n";

    #[test]
    fn a_remembered_manifest_is_the_one_parse_gives() {
        let first = parse_manifest(GOOD).unwrap();
        let second = parse_manifest(GOOD).unwrap();
        assert_eq!(first, Manifest::parse(GOOD).unwrap());
        assert_eq!(second, first);
    }

    #[test]
    fn a_bad_manifest_gives_its_error_every_time() {
        let bad = "name: Hello\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n";
        let expected = Manifest::parse(bad).unwrap_err();
        for _ in 0..2 {
            let e = parse_manifest(bad).unwrap_err();
            assert_eq!(e.to_string(), expected.to_string());
        }
    }

    #[test]
    fn the_memory_stays_bounded() {
        for i in 0..REMEMBERED_MAX + 10 {
            let text = format!("name: m{i}\nenvironment: wasm\nlifecycle: oneshot\nentry: m.wat\n");
            assert_eq!(parse_manifest(&text).unwrap().name, format!("m{i}"));
        }
        assert!(memory().lock().unwrap().len() <= REMEMBERED_MAX);
    }
}
