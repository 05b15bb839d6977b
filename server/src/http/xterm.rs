//! xterm.js for the web UI's terminal, read at run time from the system's package folder —
//! Debian's `node-xterm` (`/usr/share/nodejs/xterm`), or the folder `outpost serve
//! --xterm-dir` names — so installing the package later needs no rebuild. No copy of it lives
//! in this repository or in the binary.
//!
//! The package's CommonJS files (every `.js` under `lib/`, tests and the addons other than
//! `fit` left out) become one function each in a single browser file, with a small `require`
//! that resolves the package's relative paths; the file sets `window.OutpostXterm` to
//! `{version, Terminal, fit}`. Where the package is absent or unusable, the file sets
//! `window.OutpostXterm = {missing: REASON}` and the page says what is missing and how to get
//! it. The bundle is made on first use and again whenever the package's `package.json`
//! changes (a failure is tried again on every request); this module never fetches anything and never fails a request.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Where Debian's `node-xterm` puts the package.
pub(crate) const DEFAULT_DIR: &str = "/usr/share/nodejs/xterm";

/// The bundle made from one package folder.
#[derive(Debug)]
pub(crate) struct Bundle {
    /// The browser file: sets `window.OutpostXterm`.
    pub(crate) js: String,
    /// The package's stylesheet.
    pub(crate) css: String,
}

/// The package folder and the bundle last made from it.
#[derive(Debug)]
pub(crate) struct Xterm {
    dir: PathBuf,
    made: Mutex<Option<Made>>,
}

#[derive(Debug)]
struct Made {
    /// `package.json`'s modification time when it was made (`None`: it was missing).
    stamp: Option<SystemTime>,
    bundle: Result<Arc<Bundle>, String>,
}

impl Xterm {
    /// The package at `dir` (none: [`DEFAULT_DIR`]).
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir: dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DIR)),
            made: Mutex::new(None),
        }
    }

    /// The bundle, or why there is none; made again when the package changed since.
    pub(crate) fn bundle(&self) -> Result<Arc<Bundle>, String> {
        let stamp = std::fs::metadata(self.dir.join("package.json"))
            .and_then(|m| m.modified())
            .ok();
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        match &*made {
            // A failure is never kept: a package half installed, or a link fixed, is read
            // again on the next request.
            Some(m) if m.stamp == stamp && stamp.is_some() && m.bundle.is_ok() => m.bundle.clone(),
            _ => {
                let bundle = bundle(&self.dir).map(Arc::new);
                *made = Some(Made {
                    stamp,
                    bundle: bundle.clone(),
                });
                bundle
            }
        }
    }

    /// The script `/ui/xterm.js` serves: the bundle, or one that tells the page why there is
    /// none.
    pub(crate) fn script(&self) -> String {
        match self.bundle() {
            Ok(b) => b.js.clone(),
            Err(reason) => format!(
                "window.OutpostXterm = {{ missing: {} }};\n",
                serde_json::Value::String(reason)
            ),
        }
    }

    /// The stylesheet `/ui/xterm.css` serves (empty without the package).
    pub(crate) fn css(&self) -> String {
        self.bundle().map(|b| b.css.clone()).unwrap_or_default()
    }
}

/// The browser bundle and the stylesheet of the package at `dir`; or why there is none.
fn bundle(dir: &Path) -> Result<Bundle, String> {
    let lib = dir.join("lib");
    let package = std::fs::read_to_string(dir.join("package.json"))
        .map_err(|e| format!("no xterm.js package at {} ({e})", dir.display()))?;
    let version = json_string(&package, "version")
        .filter(|v| {
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c))
        })
        .ok_or_else(|| format!("{}/package.json names no plain version", dir.display()))?;
    let css = std::fs::read_to_string(lib.join("xterm.css"))
        .map_err(|e| format!("{}/lib/xterm.css: {e}", dir.display()))?;
    let mut modules = BTreeMap::new();
    collect(&lib, &lib, &mut modules)?;
    for entry in ["xterm.js", "addons/fit/fit.js"] {
        if !modules.contains_key(entry) {
            return Err(format!(
                "{}/lib/{entry} is missing (an xterm.js 3.x package is needed)",
                dir.display()
            ));
        }
    }
    // Every require must name a bundled module: a browser has nothing else to load.
    for (id, source) in &modules {
        for spec in requires(source) {
            if resolve(id, &spec, &modules).is_none() {
                return Err(format!(
                    "lib/{id} requires {spec:?}, which is not in the package"
                ));
            }
        }
    }
    let mut js = String::new();
    let _ = writeln!(
        js,
        "// xterm.js {version}, read at run time from {:?}.\n(function () {{\nvar defs = {{}};",
        dir.display().to_string()
    );
    for (id, source) in &modules {
        let _ = writeln!(
            js,
            "defs[{id:?}] = function (module, exports, require) {{\n{}\n}};",
            strip_source_map(source)
        );
    }
    js.push_str(SHIM);
    let _ = writeln!(
        js,
        "window.OutpostXterm = {{ version: {version:?}, Terminal: load(\"xterm.js\"), fit: load(\"addons/fit/fit.js\") }};\n}})();"
    );
    Ok(Bundle { js, css })
}

/// The `require` of the bundle: module ids are paths under `lib/`, resolved as Node does for
/// relative paths (`X.js`, then `X/index.js`), each module run once.
const SHIM: &str = r#"var cache = {};
function resolve(from, spec) {
  var parts = from.split("/");
  parts.pop();
  spec.split("/").forEach(function (p) {
    if (p === "..") { parts.pop(); } else if (p !== "." && p !== "") { parts.push(p); }
  });
  var base = parts.join("/");
  var tries = [base, base + ".js", base + "/index.js"];
  for (var i = 0; i < tries.length; i++) { if (defs.hasOwnProperty(tries[i])) { return tries[i]; } }
  throw new Error("xterm bundle: " + from + " requires " + spec + ", which is not bundled");
}
function load(id) {
  if (cache.hasOwnProperty(id)) { return cache[id].exports; }
  var module = { exports: {} };
  cache[id] = module;
  defs[id].call(module.exports, module, module.exports, function (spec) { return load(resolve(id, spec)); });
  return module.exports;
}
"#;

/// The most `.js` files and bytes a package may hold (a folder that is not xterm.js, such as
/// `/`, is refused rather than read whole).
const MAX_FILES: usize = 2000;
const MAX_BYTES: usize = 32 << 20;

/// How deep folders are followed under `lib/` (Debian links `lib/addons` elsewhere; a link
/// that loops stops here).
const MAX_DEPTH: usize = 8;

/// Every `.js` under `root` (not the tests, and of the addons only `fit`), by its path there;
/// links are followed.
fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<(), String> {
    let depth = dir.strip_prefix(root).map_or(0, |p| p.components().count());
    if depth > MAX_DEPTH {
        return Err(format!("{} is nested too deep", dir.display()));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        let Ok(id) = path.strip_prefix(root) else {
            continue;
        };
        let id = id.to_string_lossy().replace('\\', "/");
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            if id.starts_with("addons/") && id != "addons/fit" {
                continue;
            }
            collect(root, &path, out)?;
        } else if meta.is_file() && id.ends_with(".js") && !id.ends_with(".test.js") {
            let source =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.insert(id, source);
            let bytes: usize = out.values().map(String::len).sum();
            if out.len() > MAX_FILES || bytes > MAX_BYTES {
                return Err(format!(
                    "{} holds more than an xterm.js package does",
                    root.display()
                ));
            }
        }
    }
    Ok(())
}

/// The module names `require("…")` calls in `source` ask for.
fn requires(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in source.match_indices("require(") {
        let rest = &source[at + "require(".len()..];
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        if let Some(end) = rest[1..].find(quote) {
            out.push(rest[1..1 + end].to_owned());
        }
    }
    out
}

/// The module id `spec` names from module `from`, if it is bundled.
fn resolve(from: &str, spec: &str, modules: &BTreeMap<String, String>) -> Option<String> {
    if !spec.starts_with("./") && !spec.starts_with("../") {
        return None;
    }
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for part in spec.split('/') {
        match part {
            ".." => {
                parts.pop()?;
            }
            "." | "" => {}
            other => parts.push(other),
        }
    }
    let base = parts.join("/");
    [
        base.clone(),
        format!("{base}.js"),
        format!("{base}/index.js"),
    ]
    .into_iter()
    .find(|id| modules.contains_key(id))
}

/// `source` without its `//# sourceMappingURL=` line (the maps are not served).
fn strip_source_map(source: &str) -> String {
    source
        .lines()
        .filter(|line| !line.starts_with("//# sourceMappingURL="))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The string value of a top-level `"key": "value"` in a JSON text (package.json).
fn json_string(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))?;
    let rest = text[at + key.len() + 2..].trim_start().strip_prefix(':')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package folder with `files` (paths under it, and their text).
    fn package(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("outpost-xterm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const SMALL: &[(&str, &str)] = &[
        ("package.json", r#"{"name": "xterm", "version": "3.8.1"}"#),
        ("lib/xterm.css", ".xterm { color: red }"),
        (
            "lib/xterm.js",
            "var t = require('./Terminal');\nmodule.exports = t;\n//# sourceMappingURL=xterm.js.map",
        ),
        (
            "lib/Terminal.js",
            "module.exports = function Terminal() {};",
        ),
        ("lib/addons/fit/fit.js", "exports.fit = function () {};"),
        ("lib/addons/search/search.js", "exports.no = 1;"),
        ("lib/Terminal.test.js", "require('chai');"),
    ];

    #[test]
    fn a_package_becomes_one_browser_file_without_its_tests_maps_or_other_addons() {
        let dir = package("small", SMALL);
        let xterm = Xterm::new(Some(dir.clone()));
        let js = xterm.script();
        assert!(
            js.starts_with("// xterm.js 3.8.1, read at run time"),
            "{js}"
        );
        assert!(js.contains("defs[\"Terminal.js\"]") && js.contains("defs[\"addons/fit/fit.js\"]"));
        assert!(!js.contains("search") && !js.contains("chai"), "{js}");
        assert!(!js.contains("sourceMappingURL"));
        assert!(js.contains("window.OutpostXterm = { version: \"3.8.1\""));
        assert_eq!(xterm.css(), ".xterm { color: red }");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_package_says_why_and_one_installed_later_is_used_without_a_restart() {
        let dir = package("later", &[]);
        let xterm = Xterm::new(Some(dir.clone()));
        let js = xterm.script();
        assert!(
            js.starts_with("window.OutpostXterm = { missing: \"no xterm.js package at"),
            "{js}"
        );
        assert_eq!(xterm.css(), "");
        for (path, text) in SMALL {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        assert!(
            xterm.script().starts_with("// xterm.js 3.8.1"),
            "installed later"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_linked_addons_folder_is_followed() {
        let dir = package("linked", SMALL);
        let elsewhere = dir.join("elsewhere");
        std::fs::rename(dir.join("lib/addons"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("lib/addons")).unwrap();
        let js = Xterm::new(Some(dir.clone())).script();
        assert!(js.contains("defs[\"addons/fit/fit.js\"]"), "{js}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_require_outside_the_package_is_refused() {
        let mut files = SMALL.to_vec();
        files.push(("lib/Bad.js", "require('../../etc/passwd');"));
        let dir = package("outside", &files);
        let reason = bundle(&dir).unwrap_err();
        assert!(reason.contains("lib/Bad.js requires"), "{reason}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
