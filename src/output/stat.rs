//! `bprof stat` output, laid out like `perf stat`: aligned counts with
//! thousands separators and derived metrics, or `-x SEP` CSV, or `-j` JSON.

use std::io::{self, Write};

use crate::bpf::counting::Reading;
use crate::events::counting::EventSpec;

/// How counts are printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    Human,
    /// `-x SEP`: value, unit, event, run time, % running, metric value, metric unit.
    Csv(String),
    /// `-j`: one JSON object per line.
    Json,
}

/// One printed line's worth of data.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    /// The event.
    pub spec: &'a EventSpec,
    /// Its count, `None` when the machine cannot count it.
    pub reading: Option<Reading>,
}

/// "N cycles, M instructions, X insn per cycle", when both were counted.
pub(crate) fn cycles_text(c: &[Option<Reading>]) -> Option<String> {
    let (cycles, insns) = (c.first().copied().flatten()?, c.get(1).copied().flatten()?);
    let (cy, ins) = (cycles.scaled(), insns.scaled());
    let ipc = if cy > 0 {
        format!(", {:.2} insn per cycle", ins as f64 / cy as f64)
    } else {
        String::new()
    };
    Some(format!(
        "{} cycles, {} instructions{ipc}",
        thousands(cy),
        thousands(ins)
    ))
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A derived metric for `line`, computed from the other lines of the block
/// (perf's shadow metrics): (value, unit).
fn metric(line: &Line<'_>, all: &[Line<'_>], seconds: f64) -> Option<(f64, &'static str)> {
    let r = line.reading?;
    let get = |base: &str| {
        all.iter()
            .find(|l| {
                l.spec.base == base
                    && l.spec.exclude_user == line.spec.exclude_user
                    && l.spec.exclude_kernel == line.spec.exclude_kernel
            })
            .or_else(|| all.iter().find(|l| l.spec.base == base))
            .and_then(|l| l.reading)
            .map(|r| r.scaled() as f64)
    };
    let v = r.scaled() as f64;
    let ratio = |den: Option<f64>| den.filter(|d| *d > 0.0).map(|d| v / d);
    match line.spec.base {
        "cpu-clock" | "task-clock" if seconds > 0.0 => Some((v / 1e9 / seconds, "CPUs utilized")),
        "instructions" => ratio(get("cycles")).map(|x| (x, "insn per cycle")),
        "cycles" => get("task-clock")
            .or_else(|| get("cpu-clock"))
            .filter(|t| *t > 0.0)
            .map(|t| (v / t, "GHz")),
        "branch-misses" => ratio(get("branches")).map(|x| (100.0 * x, "of all branches")),
        "cache-misses" => ratio(get("cache-references")).map(|x| (100.0 * x, "of all cache refs")),
        // perf's rates are per second of task time when it was counted.
        "context-switches" | "cpu-migrations" | "page-faults" | "minor-faults" | "major-faults" => {
            let task_secs = get("task-clock")
                .or_else(|| get("cpu-clock"))
                .map(|ns| ns / 1e9);
            task_secs
                .or(Some(seconds))
                .filter(|s| *s > 0.0)
                .map(|s| (v / s, "/sec"))
        }
        _ => None,
    }
}

fn value_text(line: &Line<'_>, human: bool) -> (String, &'static str) {
    match line.reading {
        None => ("<not supported>".into(), ""),
        Some(r) if line.spec.is_clock() => {
            let ns = r.scaled();
            let frac = (ns % 1_000_000) / 10_000;
            let ms = if human {
                thousands(ns / 1_000_000)
            } else {
                (ns / 1_000_000).to_string()
            };
            (format!("{ms}.{frac:02}"), "msec")
        }
        Some(r) => (
            if human {
                thousands(r.scaled())
            } else {
                r.scaled().to_string()
            },
            "",
        ),
    }
}

fn pct_running(r: &Option<Reading>) -> f64 {
    match r {
        Some(r) if r.enabled > 0 => 100.0 * r.running.min(r.enabled) as f64 / r.enabled as f64,
        _ => 100.0,
    }
}

/// Writes one block of counts. `prefix` is the interval timestamp column
/// (`-I`), `cgroup` the --for-each-cgroup name; `seconds` the time the
/// counts cover, for rates.
pub fn write_lines(
    out: &mut dyn Write,
    format: &Format,
    lines: &[Line<'_>],
    seconds: f64,
    prefix: Option<f64>,
    cgroup: Option<&str>,
) -> io::Result<()> {
    for line in lines {
        let m = metric(line, lines, seconds);
        let text = match format {
            Format::Human => human_line(line, m, prefix, cgroup),
            Format::Csv(sep) => csv_line(line, m, prefix, cgroup, sep),
            Format::Json => json_line(line, m, prefix, cgroup),
        };
        writeln!(out, "{text}")?;
    }
    Ok(())
}

/// A derived metric: its value and unit.
type Metric = Option<(f64, &'static str)>;

fn human_line(line: &Line<'_>, m: Metric, prefix: Option<f64>, cgroup: Option<&str>) -> String {
    let (value, unit) = value_text(line, true);
    let mut o = String::new();
    if let Some(ts) = prefix {
        o.push_str(&format!("{ts:>14.9} "));
    }
    let name = match cgroup {
        Some(cg) => format!("{:<24} {cg}", line.spec.name),
        None => line.spec.name.clone(),
    };
    o.push_str(&format!("{value:>18} {unit:<5}{name:<32}"));
    if let Some((v, u)) = m {
        let v = if u.starts_with("of all") {
            format!("{v:>8.2}%")
        } else {
            format!("{v:>8.3}")
        };
        o.push_str(&format!(" # {v} {u}"));
    }
    let pct = pct_running(&line.reading);
    if line.reading.is_some() && pct < 99.995 {
        o.push_str(&format!("  ({pct:.2}%)"));
    }
    o
}

fn csv_line(
    line: &Line<'_>,
    m: Metric,
    prefix: Option<f64>,
    cgroup: Option<&str>,
    sep: &str,
) -> String {
    let (value, unit) = value_text(line, false);
    let run = line.reading.map_or(0, |r| r.running);
    let (mv, mu) = m.map_or((String::new(), ""), |(v, u)| (format!("{v:.2}"), u));
    let mut fields = Vec::new();
    if let Some(ts) = prefix {
        fields.push(format!("{ts:.9}"));
    }
    fields.extend([value, unit.to_string(), line.spec.name.clone()]);
    if let Some(cg) = cgroup {
        fields.push(cg.to_string());
    }
    fields.extend([
        run.to_string(),
        format!("{:.2}", pct_running(&line.reading)),
        mv,
        mu.to_string(),
    ]);
    fields.join(sep)
}

fn json_line(line: &Line<'_>, m: Metric, prefix: Option<f64>, cgroup: Option<&str>) -> String {
    let (value, unit) = value_text(line, false);
    let mut o = String::from("{");
    if let Some(ts) = prefix {
        o.push_str(&format!("\"interval\" : {ts:.9}, "));
    }
    o.push_str(&format!(
        "\"counter-value\" : \"{}\", \"unit\" : \"{unit}\", \"event\" : \"{}\"",
        json_escape(&value),
        json_escape(&line.spec.name)
    ));
    if let Some(cg) = cgroup {
        o.push_str(&format!(", \"cgroup\" : \"{}\"", json_escape(cg)));
    }
    o.push_str(&format!(
        ", \"event-runtime\" : {}, \"pcnt-running\" : {:.2}",
        line.reading.map_or(0, |r| r.running),
        pct_running(&line.reading)
    ));
    if let Some((v, u)) = m {
        o.push_str(&format!(
            ", \"metric-value\" : \"{v:.6}\", \"metric-unit\" : \"{u}\""
        ));
    }
    o.push('}');
    o
}

fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn ipc_and_csv() {
        let cyc = EventSpec::parse("cycles").unwrap();
        let ins = EventSpec::parse("instructions").unwrap();
        let lines = [
            Line {
                spec: &cyc,
                reading: Some(Reading {
                    counter: 2000,
                    enabled: 10,
                    running: 10,
                }),
            },
            Line {
                spec: &ins,
                reading: Some(Reading {
                    counter: 3000,
                    enabled: 10,
                    running: 5,
                }),
            },
        ];
        let mut human = Vec::new();
        write_lines(&mut human, &Format::Human, &lines, 1.0, None, None).unwrap();
        let human = String::from_utf8(human).unwrap();
        // 3000 instructions counted half the time scale to 6000: IPC 3.
        assert!(human.contains("6,000      instructions"), "{human}");
        assert!(human.contains("3.000 insn per cycle"), "{human}");
        assert!(human.contains("(50.00%)"), "{human}");
        let mut csv = Vec::new();
        write_lines(
            &mut csv,
            &Format::Csv(",".into()),
            &lines[..1],
            1.0,
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "2000,,cycles,10,100.00,,\n"
        );
    }
}
