//! A real browser for the dashboard's tests: headless Chromium (the Debian
//! `chromium` package `.ci/run` installs) driven over the DevTools
//! protocol on `--remote-debugging-pipe` (JSON messages ended by NUL on
//! file descriptors 3 and 4: no WebSocket client needed).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The browser binary: `$TESSERA_CHROMIUM`, else `chromium`.
pub fn chromium() -> String {
    std::env::var("TESSERA_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// One headless Chromium with one page attached.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds is two ints; pipe2 fills them or fails.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just made and are ours alone.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts Chromium (window `w`×`h`) and opens a blank page.
    pub fn launch(w: u32, h: u32) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().expect("profile dir");
        let (cmd_r, cmd_w) = pipe();
        let (ev_r, ev_w) = pipe();
        let (in_fd, out_fd) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let mut c = Command::new(chromium());
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--remote-debugging-pipe",
            &format!("--window-size={w},{h}"),
            &format!("--user-data-dir={}", profile.path().display()),
            "about:blank",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(in_fd, 3) < 0 || libc::dup2(out_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): the dashboard test needs Chromium (Debian package `chromium`, installed by .ci/run)",
                chromium()
            )
        });
        drop(cmd_r);
        drop(ev_w);
        let (tx, rx) = channel();
        let reader = std::fs::File::from(ev_r);
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        buf.pop();
                        if let Ok(v) = serde_json::from_slice::<Value>(&buf)
                            && tx.send(v).is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to: std::fs::File::from(cmd_w),
            from: rx,
            next: 1,
            session: String::new(),
            _profile: profile,
        };
        let t = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().expect("target id").to_string();
        let a = b.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = a["sessionId"].as_str().expect("session id").to_string();
        b.page("Page.enable", json!({}));
        b.page("Runtime.enable", json!({}));
        b
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        let id = self.next;
        self.next += 1;
        let mut m = json!({"id": id, "method": method, "params": params});
        if session {
            m["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&m).expect("json");
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to the browser");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == json!(id) => {
                    assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                    return v["result"].clone();
                }
                Ok(_) => continue, // an event
                Err(RecvTimeoutError::Timeout) => panic!("{method}: no answer in 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("{method}: the browser exited"),
            }
        }
    }

    /// A browser-level command.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    /// A command to the page.
    pub fn page(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Opens `url` in the page.
    pub fn navigate(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url}));
    }

    /// The value of JavaScript `expr` in the page (promises awaited).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is truthy; answers how long that took, or
    /// panics naming `what` and the page's text.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration, what: &str) -> Duration {
        let start = Instant::now();
        loop {
            let v = self.eval(&format!(
                "(() => {{ try {{ return !!({expr}); }} catch (e) {{ return false; }} }})()"
            ));
            if v == json!(true) {
                return start.elapsed();
            }
            if start.elapsed() > timeout {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!("{what}: not within {timeout:?}; the page says:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Writes a PNG of the page to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.page(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let data = base64(r["data"].as_str().expect("png data"));
        assert!(data.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, data).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 decoding (what CDP sends binary data as).
pub fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = ((acc << 6) | v) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Where screenshots go: `target/dashboard/` (under Cargo's target dir).
pub fn shots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        .join("dashboard");
    std::fs::create_dir_all(&d).expect("screenshot dir");
    d
}
