//! Output file names of periodic profiles (`--every`): each output is a
//! pattern, expanded for every interval. `%t` the interval's start (UTC,
//! `20261125T114000Z`), `%s` the same in seconds since the epoch, `%n` the
//! interval's number (from 1, six digits), `%d` its length in seconds, `%%`
//! a `%`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};

/// The start of an interval as `%t` writes it: ISO 8601 basic format, UTC.
pub fn compact_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(['-', ':'], "")
}

/// Checks an output pattern: known escapes only, and at least one that
/// differs between intervals (else each would overwrite the last).
pub fn check_pattern(option: &str, pattern: &Path) -> Result<()> {
    let bytes = pattern.as_os_str().as_bytes();
    let mut varies = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            match bytes.get(i + 1) {
                Some(b't' | b's' | b'n') => varies = true,
                Some(b'd' | b'%') => {}
                Some(&c) => bail!(
                    "{option} {}: unknown escape '%{}' (use %t, %s, %n, %d or %%)",
                    pattern.display(),
                    c as char
                ),
                None => bail!("{option} {}: a lone '%' at the end", pattern.display()),
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    if !varies {
        bail!(
            "{option} {}: with --every each interval needs its own file: put %t (start time), %s or %n (number) in the name",
            pattern.display()
        );
    }
    Ok(())
}

/// Expands an output pattern (checked by [`check_pattern`]) for one interval.
pub fn expand(pattern: &Path, start: SystemTime, number: u64, length: Duration) -> PathBuf {
    let bytes = pattern.as_os_str().as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len() + 16);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 1 < bytes.len() {
            let secs = start
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            match bytes[i + 1] {
                b't' => out.extend(compact_time(start).bytes()),
                b's' => out.extend(secs.to_string().bytes()),
                b'n' => out.extend(format!("{number:06}").bytes()),
                b'd' => out.extend(format!("{:.3}", length.as_secs_f64()).bytes()),
                c => out.push(c),
            }
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_and_must_vary() {
        let t = UNIX_EPOCH + Duration::from_secs(1_764_071_000);
        let p = expand(
            Path::new("out/%t-%s-%n-%ds-100%%.pb.gz"),
            t,
            7,
            Duration::from_millis(10_250),
        );
        assert_eq!(
            p,
            Path::new("out/20251125T114320Z-1764071000-000007-10.250s-100%.pb.gz")
        );
        assert!(check_pattern("-o", Path::new("a/%t.folded")).is_ok());
        assert!(check_pattern("-o", Path::new("%n")).is_ok());
        let err = |p: &str| {
            check_pattern("--pprof", Path::new(p))
                .unwrap_err()
                .to_string()
        };
        assert!(err("a.pb.gz").contains("its own file"));
        assert!(err("a-%d.pb.gz").contains("its own file"));
        assert!(err("a-%x.pb.gz").contains("unknown escape '%x'"));
        assert!(err("a-%t%").contains("lone '%'"));
    }
}
