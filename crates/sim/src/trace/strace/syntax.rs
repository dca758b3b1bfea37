//! The line syntax of `strace -f -y -v` output: one system call per line,
//! `PID  name(arg, arg, …) = result`, with calls cut in two by another
//! process (`<unfinished ...>` then `<... name resumed>`) joined again.

use std::collections::HashMap;

/// One finished system call.
#[derive(Debug, Clone, PartialEq)]
pub struct Syscall {
    /// The process (thread) that made it.
    pub pid: u32,
    /// Its name (`openat`, `newfstatat`, …).
    pub name: String,
    /// Its arguments as strace printed them, split at top-level commas.
    pub args: Vec<String>,
    /// The result: `Ok(value)` (a number, or 0 when strace printed none)
    /// or `Err(errno name)`.
    pub result: Result<i64, String>,
    /// The path strace printed after a returned descriptor (`-y`).
    pub result_path: Option<String>,
    /// When it started (`-ttt`, seconds); 0 without timestamps.
    pub time: f64,
}

/// Joins split calls and parses lines; lines that are not calls (signals,
/// exits) give nothing.
#[derive(Default)]
pub struct Lines {
    unfinished: HashMap<u32, (f64, String)>,
}

/// Splits `PID  [SECONDS.MICROS] rest`; a line without a pid (strace
/// without `-f`) is pid 0, one without a timestamp (no `-ttt`) time 0.
fn split_pid(line: &str) -> (u32, f64, &str) {
    let mut t = line.trim_start();
    // strace writing to stderr (no -o) prints `[pid  N] ` before a child's calls.
    if let Some(rest) = t.strip_prefix("[pid")
        && let Some((n, after)) = rest.split_once(']')
        && let Ok(pid) = n.trim().parse::<u32>()
    {
        t = after.trim_start();
        let (_, time, r) = split_pid_plain(t);
        return (pid, time, r);
    }
    split_pid_plain(t)
}

fn split_pid_plain(t: &str) -> (u32, f64, &str) {
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (pid, rest) = match t[..digits].parse() {
        Ok(pid) if t[digits..].starts_with(' ') => (pid, t[digits..].trim_start()),
        _ => (0, t),
    };
    let stamp = rest
        .split_once(' ')
        .filter(|(w, _)| w.contains('.') && w.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    match stamp.and_then(|(w, r)| Some((w.parse::<f64>().ok()?, r))) {
        Some((time, r)) => (pid, time, r.trim_start()),
        None => (pid, 0.0, rest),
    }
}

impl Lines {
    /// Feeds one line; returns the call it completes, if any.
    pub fn line(&mut self, line: &str) -> Option<Syscall> {
        let (pid, time, rest) = split_pid(line);
        if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            self.unfinished
                .insert(pid, (time, head.trim_end().to_string()));
            return None;
        }
        if let Some(tail) = rest.strip_prefix("<... ") {
            let (name, after) = tail.split_once(" resumed>")?;
            let (started, head) = self.unfinished.remove(&pid)?;
            if !head.starts_with(&format!("{name}(")) {
                return None;
            }
            let joined = format!("{head}{after}");
            return parse_call(pid, started, &joined);
        }
        parse_call(pid, time, rest)
    }
}

/// The process a `+++ exited with N +++` or `+++ killed by SIG +++` line
/// reports gone.
pub fn exited(line: &str) -> Option<u32> {
    let (pid, _, rest) = split_pid(line);
    (rest.starts_with("+++ exited") || rest.starts_with("+++ killed")).then_some(pid)
}

/// Where the top-level argument list of `s` (which starts just after the
/// opening parenthesis) ends, and the byte offsets of its top-level commas.
fn scan_args(s: &str) -> Option<(usize, Vec<usize>)> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            // A `-y` path after a descriptor number: skip to its end.
            b'<' if i > 0 && b[i - 1].is_ascii_digit() => {
                while i < b.len() && b[i] != b'>' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth > 0 => depth -= 1,
            b')' => return Some((i, commas)),
            b',' if depth == 0 => commas.push(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// A descriptor as `-y` prints it: `3</some/path>` gives (3, the path).
/// strace escapes the path as it escapes strings (`\303\251`, `\<`…);
/// a descriptor of a deleted file (`(deleted)`) names nothing.
pub fn fd_path(arg: &str) -> Option<(i64, String)> {
    let (n, rest) = arg.split_once('<')?;
    let n: i64 = n.trim().parse().ok()?;
    let path = rest.strip_suffix('>')?;
    if path.ends_with(" (deleted)") {
        return None;
    }
    let bytes = unescape_c(path)?;
    Some((n, String::from_utf8_lossy(&bytes).into_owned()))
}

fn parse_call(pid: u32, time: f64, s: &str) -> Option<Syscall> {
    let open = s.find('(')?;
    let name = &s[..open];
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return None;
    }
    let body = &s[open + 1..];
    let (end, commas) = scan_args(body)?;
    let mut args = Vec::new();
    let mut start = 0;
    for c in commas.into_iter().chain(std::iter::once(end)) {
        let a = body[start..c].trim();
        if !a.is_empty() {
            args.push(a.to_string());
        }
        start = c + 1;
    }
    let ret = body[end + 1..].trim_start().strip_prefix('=')?.trim();
    // A descriptor with its path (which may hold spaces): `6</a b>`.
    let described = ret
        .find('<')
        .filter(|&i| i > 0 && ret[..i].bytes().all(|b| b.is_ascii_digit()))
        .and_then(|_| Some(&ret[..ret.rfind('>')? + 1]));
    let mut words = ret.split_whitespace();
    let first = words.next()?;
    // `= ?`: interrupted or never returned (restarted, killed): not a success.
    let (result, result_path) = if first == "?" {
        (Err("?".to_string()), None)
    } else if let Some((n, p)) = described.and_then(fd_path) {
        (Ok(n), Some(p))
    } else if let Ok(n) = first.parse::<i64>() {
        if n < 0 {
            (Err(words.next().unwrap_or("EUNKNOWN").to_string()), None)
        } else {
            (Ok(n), None)
        }
    } else {
        // Hex results (addresses) and the like: success.
        (Ok(0), None)
    };
    Some(Syscall {
        pid,
        name: name.to_string(),
        args,
        result,
        result_path,
        time,
    })
}

/// Decodes a C string as strace prints it (`"a\"b\n\303\251"`, perhaps
/// followed by `...` when cut short); `None` for anything else (`NULL`, an
/// address).
pub fn string(arg: &str) -> Option<Vec<u8>> {
    let a = arg.trim();
    let inner = a.strip_prefix('"')?;
    let inner = inner
        .strip_suffix("\"...")
        .or_else(|| inner.strip_suffix('"'))?;
    unescape_c(inner)
}

/// Decodes C escapes (`\n`, `\"`, `\303`, `\x41`…) as strace prints them.
fn unescape_c(inner: &str) -> Option<Vec<u8>> {
    let b = inner.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        let c = b[i];
        match c {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'v' => out.push(0x0b),
            b'f' => out.push(0x0c),
            b'x' => {
                let hex = inner.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v: u32 = 0;
                let mut n = 0;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + u32::from(b[i] - b'0');
                    i += 1;
                    n += 1;
                }
                out.push(u8::try_from(v).ok()?);
                continue;
            }
            other => out.push(other),
        }
        i += 1;
    }
    Some(out)
}

/// The entries of a `getdents64` buffer printed with `-v`: (name, d_type).
pub fn dirents(arg: &str) -> Vec<(Vec<u8>, String)> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(i) = rest.find("d_type=") {
        let after = &rest[i + "d_type=".len()..];
        let ty: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(j) = after.find("d_name=") else {
            break;
        };
        let name_start = &after[j + "d_name=".len()..];
        // The name runs to the closing quote (escapes skipped).
        let b = name_start.as_bytes();
        let mut k = 1;
        while k < b.len() && b[k] != b'"' {
            if b[k] == b'\\' {
                k += 1;
            }
            k += 1;
        }
        let quoted = &name_start[..(k + 1).min(name_start.len())];
        if let Some(name) = string(quoted) {
            out.push((name, ty));
        }
        rest = &name_start[(k + 1).min(name_start.len())..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_results_and_descriptor_paths() {
        let mut l = Lines::default();
        let c = l
            .line(r#"22070 openat(5</tmp/t, x>, "c", O_RDONLY|O_DIRECTORY) = 6</tmp/t, x/c>"#)
            .unwrap();
        assert_eq!(c.pid, 22070);
        assert_eq!(c.name, "openat");
        assert_eq!(
            c.args,
            vec!["5</tmp/t, x>", "\"c\"", "O_RDONLY|O_DIRECTORY"]
        );
        assert_eq!(c.result, Ok(6));
        assert_eq!(c.result_path.as_deref(), Some("/tmp/t, x/c"));
        let e = l
            .line(r#"7 newfstatat(AT_FDCWD, "a(b", 0x7ff, 0) = -1 ENOENT (No such file or directory)"#)
            .unwrap();
        assert_eq!(e.result, Err("ENOENT".into()));
        assert_eq!(e.args[1], "\"a(b\"");
        assert!(l.line("7 +++ exited with 0 +++").is_none());
        let t = l.line("8 1795662028.094678 close(3</a>) = 0").unwrap();
        assert_eq!((t.pid, t.time), (8, 1795662028.094678));
        let p = l
            .line("[pid  9] openat(AT_FDCWD, \"x\", O_RDONLY) = 4</caf\\303\\251 \\<1\\>>")
            .unwrap();
        assert_eq!(p.pid, 9);
        assert_eq!(p.result_path.as_deref(), Some("/caf\u{e9} <1>"));
        let q = l
            .line("9 mkdir(\"d\", 0777) = ? ERESTARTSYS (To be restarted)")
            .unwrap();
        assert!(q.result.is_err());
        assert_eq!(fd_path("3</gone (deleted)>"), None);
        assert!(l.line("7 --- SIGCHLD {si_signo=SIGCHLD} ---").is_none());
    }

    #[test]
    fn split_calls_are_joined_per_process() {
        let mut l = Lines::default();
        assert!(
            l.line(r#"1 newfstatat(AT_FDCWD, "x",  <unfinished ...>"#)
                .is_none()
        );
        assert!(l.line("2 close(3</a> <unfinished ...>").is_none());
        let a = l
            .line("1 <... newfstatat resumed>{st_mode=S_IFDIR|0755, st_size=1}, 0) = 0")
            .unwrap();
        assert_eq!(a.args.len(), 4);
        assert!(a.args[2].contains("S_IFDIR"));
        let b = l.line("2 <... close resumed>) = 0").unwrap();
        assert_eq!(b.name, "close");
        assert_eq!(fd_path(&b.args[0]), Some((3, "/a".into())));
    }

    #[test]
    fn strings_and_dirents_decode_escapes() {
        assert_eq!(
            string(r#""a\"b\\c\n\303\251""#).unwrap(),
            b"a\"b\\c\n\xc3\xa9"
        );
        assert_eq!(string(r#""abc"..."#).unwrap(), b"abc");
        assert_eq!(string("NULL"), None);
        let d = dirents(
            r#"[{d_ino=1, d_off=2, d_reclen=24, d_type=DT_DIR, d_name="."}, {d_ino=3, d_off=4, d_reclen=24, d_type=DT_REG, d_name="a\"}b"}]"#,
        );
        assert_eq!(
            d,
            vec![
                (b".".to_vec(), "DT_DIR".to_string()),
                (b"a\"}b".to_vec(), "DT_REG".to_string())
            ]
        );
    }
}
