//! A real browser for the web UI's tests: Debian's chromium, headless, driven over the
//! DevTools protocol by the `headless_chrome` crate (its `fetch` feature is off: no browser is
//! ever downloaded). Each [`Chromium`] has its own temporary profile and is killed on drop.
//! Helpers wait for a condition in the page (never for a fixed time).

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;

use crate::common::PATIENCE;

/// The browser under test: `OUTPOST_CHROMIUM` when set, else Debian's.
pub fn chromium_path() -> PathBuf {
    std::env::var_os("OUTPOST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// A running headless chromium with its own profile folder.
pub struct Chromium {
    pub browser: Browser,
    profile: PathBuf,
}

impl Chromium {
    /// Starts chromium with a `width`×`height` window. Fails the test if it cannot start:
    /// the browser is a requirement of these tests, not an option.
    pub fn start(width: u32, height: u32) -> Chromium {
        let path = chromium_path();
        assert!(
            path.exists(),
            "{} is missing: install Debian's chromium package (or set OUTPOST_CHROMIUM)",
            path.display()
        );
        let profile = crate::common::temp_dir("chromium-profile");
        let args: Vec<&OsStr> = [
            "--headless=new",
            "--disable-dev-shm-usage",
            "--no-default-browser-check",
            "--hide-scrollbars",
        ]
        .iter()
        .map(OsStr::new)
        .collect();
        let options = LaunchOptions::default_builder()
            .path(Some(path))
            // `--headless=new` is passed above; the crate's own flag is the old mode.
            .headless(false)
            .sandbox(false)
            .enable_gpu(false)
            .window_size(Some((width, height)))
            .user_data_dir(Some(profile.clone()))
            .idle_browser_timeout(Duration::from_secs(600))
            .args(args)
            .build()
            .expect("launch options");
        let browser = Browser::new(options).expect("chromium starts");
        Chromium { browser, profile }
    }

    /// A new tab at `url`, loaded.
    pub fn open(&self, url: &str) -> Page {
        let tab = self.browser.new_tab().expect("a new tab");
        tab.set_default_timeout(PATIENCE);
        tab.navigate_to(url).expect("navigates");
        tab.wait_until_navigated().expect("loads");
        Page { tab }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One tab.
pub struct Page {
    pub tab: Arc<Tab>,
}

impl Page {
    /// The value of `expression` (any JSON-able value; a promise is awaited).
    pub fn eval(&self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|e| panic!("evaluating {expression}: {e}"))
    }

    /// [`Page::eval`], with what the page threw as an error.
    pub fn try_eval(&self, expression: &str) -> Result<Value, String> {
        let wrapped = format!(
            "Promise.resolve((() => {{ return ({expression}); }})()).then(v => JSON.stringify(v === undefined ? null : v))"
        );
        let result = self
            .tab
            .evaluate(&wrapped, true)
            .map_err(|e| e.to_string())?;
        match result.value {
            Some(Value::String(text)) => serde_json::from_str(&text).map_err(|e| e.to_string()),
            other => Err(format!("{other:?} ({:?})", result.description)),
        }
    }

    /// Waits until `expression` is truthy in the page (an exception counts as not yet: the
    /// page may be loading); its value.
    pub fn wait_until(&self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.try_eval(expression);
            let truthy = match &value {
                Err(_) | Ok(Value::Null) => false,
                Ok(Value::Bool(b)) => *b,
                Ok(Value::Number(n)) => n.as_f64() != Some(0.0),
                Ok(Value::String(s)) => !s.is_empty(),
                Ok(Value::Array(_) | Value::Object(_)) => true,
            };
            if truthy {
                return value.unwrap_or_default();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} (`{expression}` is {value:?}); the page says: {:?}; its terminal shows: {:?}",
                self.try_eval("document.body.innerText"),
                self.try_eval("window.outpostScreen ? window.outpostScreen().join('\\n') : null")
            );
            // The poll's pace: the condition is checked again at the top of the loop.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `text` into the focused element, key by key.
    pub fn type_text(&self, text: &str) {
        self.tab.type_str(text).expect("types");
    }

    /// Presses one named key (`Enter`, `Tab`…).
    pub fn press(&self, key: &str) {
        self.tab.press_key(key).expect("presses");
    }

    /// Lays the page out as in a viewport `width` × `height` CSS pixels (a phone's, narrower
    /// than a desktop window can be made).
    #[allow(dead_code)]
    pub fn set_viewport(&self, width: u32, height: u32) {
        use headless_chrome::protocol::cdp::Emulation::SetDeviceMetricsOverride;
        self.tab
            .call_method(SetDeviceMetricsOverride {
                width,
                height,
                device_scale_factor: 1.0,
                mobile: false,
                scale: None,
                screen_width: None,
                screen_height: None,
                position_x: None,
                position_y: None,
                dont_set_visible_size: None,
                screen_orientation: None,
                viewport: None,
                display_feature: None,
                device_posture: None,
            })
            .expect("the viewport is set");
        self.wait_until(
            "the new viewport",
            &format!("window.innerWidth === {width}"),
        );
    }

    /// Keeps a screenshot of the page as `NAME.png` in the tests' artefact folder
    /// (`CARGO_TARGET_TMPDIR`), for people to look at; returns its path.
    #[allow(dead_code)]
    pub fn keep_screenshot(&self, name: &str) -> std::path::PathBuf {
        let shot = self
            .tab
            .capture_screenshot(
                headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption::Png,
                None,
                None,
                true,
            )
            .expect("a screenshot");
        assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
        std::fs::write(&path, &shot).expect("the screenshot is written");
        path
    }

    /// Signs in with `token` through the form.
    pub fn sign_in(&self, token: &str) {
        self.wait_until(
            "the sign-in form",
            "document.getElementById('token') !== null",
        );
        self.eval("document.getElementById('token').focus()");
        self.type_text(token);
        self.press("Enter");
    }

    /// The rows of table `id`, as the text of their cells.
    pub fn table(&self, id: &str) -> Vec<Vec<String>> {
        let value = self.eval(&format!(
            "Array.from(document.querySelectorAll('#{id} tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))"
        ));
        serde_json::from_value(value).expect("rows of cells")
    }

    /// Clicks the tab button named `tab` and waits for its data to load.
    pub fn show_tab(&self, tab: &str) {
        self.eval("delete document.body.dataset.loaded");
        self.eval(&format!(
            "document.querySelector('#tabs button[data-tab={tab}]').click()"
        ));
        self.wait_until(
            &format!("the {tab} tab to load"),
            &format!("document.body.dataset.loaded === '{tab}'"),
        );
    }
}
