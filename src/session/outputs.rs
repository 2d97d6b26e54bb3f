//! A profile's outputs: the files created before recording (so an
//! unwritable path fails first), then written from the symbolized stacks,
//! files before stdout.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};

use crate::events::sampling::Event;
use crate::output::file::OutputFile;
use crate::output::summary::Summary;
use crate::output::{folded, otlp, pprof, report, svg};
use crate::session::runner::End;
use crate::session::settings::ProfileSettings;
use crate::symbolize;

/// What recording produced, before maps are read.
pub(super) struct Recorded {
    pub(super) end: End,
    pub(super) elapsed: Duration,
    pub(super) event: Event,
    pub(super) counts: Option<String>,
    pub(super) status: Option<crate::target::ExitStatus>,
    /// `--call-graph dwarf`: the `-v` line on the unwind tables.
    pub(super) unwind: Option<String>,
    /// Files whose unwind table did not fit the tables' budget.
    pub(super) unwind_full: usize,
    /// When recording started (the pprof files' start time).
    pub(super) started_at: SystemTime,
    /// What the Python tracker did (walking Python frames).
    pub(super) python: Option<crate::pyframes::tracker::TrackerStats>,
}

/// The output files, created before the profile so an unwritable path fails
/// before anything is recorded.
pub(super) struct Files {
    folded: Option<OutputFile>,
    svg: Option<OutputFile>,
    pprof: Option<OutputFile>,
    stats_json: Option<OutputFile>,
}

impl Files {
    pub(super) fn create(settings: &ProfileSettings) -> Result<Files> {
        let create =
            |p: &Option<std::path::PathBuf>| p.as_deref().map(OutputFile::create).transpose();
        // Periodic outputs are patterns, one file per interval. Their
        // folders are made now (the part of the path before any escape),
        // so a missing, refused or unwritable one fails before anything is
        // recorded; each interval's name is checked when it is written (one
        // that cannot be costs that file only).
        let pattern = |p: &Option<std::path::PathBuf>| -> Result<Option<OutputFile>> {
            if settings.every.is_none() {
                return create(p);
            }
            if let Some(p) = p {
                let fixed = fixed_folder(p);
                let shown = crate::names::path(&fixed);
                let dir = crate::fsafe::open_dir_nofollow(&fixed, Some(0o755))
                    .with_context(|| format!("cannot make the output folder {shown}"))?;
                // SAFETY: a valid directory fd and a NUL-terminated name.
                if unsafe { libc::faccessat(dir.as_raw_fd(), c".".as_ptr(), libc::W_OK, 0) } != 0 {
                    return Err(io::Error::last_os_error())
                        .with_context(|| format!("cannot write in the output folder {shown}"));
                }
            }
            Ok(None)
        };
        // The summary names the command line, which may hold what its
        // arguments hold: for its user only.
        let stats_json = settings
            .stats_json
            .as_deref()
            .map(|p| {
                let opts = crate::output::file::Options {
                    private: !settings.target.command.is_empty(),
                    ..Default::default()
                };
                OutputFile::create_with(p, opts)
            })
            .transpose()?;
        Ok(Files {
            folded: pattern(&settings.folded_file)?,
            svg: pattern(&settings.svg)?,
            pprof: pattern(&settings.pprof)?,
            stats_json,
        })
    }
}

/// The folder of an output pattern up to its first component with an
/// escape (`out/%t/x.folded` → `out`): the same for every interval.
fn fixed_folder(pattern: &std::path::Path) -> std::path::PathBuf {
    let parent = pattern.parent().unwrap_or(std::path::Path::new(""));
    let fixed: std::path::PathBuf = parent
        .components()
        .take_while(|c| !c.as_os_str().as_encoded_bytes().contains(&b'%'))
        .collect();
    if fixed.as_os_str().is_empty() {
        std::path::PathBuf::from(".")
    } else {
        fixed
    }
}

/// What the end of a profile says about its outputs, after the summary
/// (which says where the samples went): the files written, those left
/// alone for want of samples, and where to go next from the table.
pub(super) struct Unwritten {
    folded: Option<std::path::PathBuf>,
    pprof: Option<std::path::PathBuf>,
    svg: Option<std::path::PathBuf>,
    /// Files written, in order.
    written: Vec<std::path::PathBuf>,
    /// The table of functions was printed: say what else there is.
    next_hint: bool,
    /// stdout's reader went away (`| head`): said by the exit, after the
    /// summary, which stderr still takes.
    stdout_closed: Option<anyhow::Error>,
}

impl Unwritten {
    pub(super) fn report(self) -> Result<()> {
        for path in &self.written {
            eprintln!("bprof: wrote {}", crate::names::path(path));
        }
        if self.next_hint {
            eprintln!("bprof: next: --svg FILE for a flame graph, -f for folded stacks, --pprof FILE for go tool pprof, --stacks for every stack");
        }
        for path in self.folded.into_iter().chain(self.pprof) {
            eprintln!(
                "bprof: no samples were recorded, so nothing was written to {} (left as it was)",
                path.display()
            );
        }
        if let Some(path) = self.svg {
            bail!(
                "no samples were recorded, so no flame graph was written to {}",
                path.display()
            );
        }
        self.stdout_closed.map_or(Ok(()), Err)
    }
}

/// Files first, then stdout: a closed pipe (`| head`) must not cost them.
/// With nothing to write, an existing file is left as it was.
pub(super) fn write_outputs(
    settings: &ProfileSettings,
    files: Files,
    summary: &Summary,
    stacks: &[symbolize::Stack],
    frames: &symbolize::Frames,
    lines: &[(String, u64)],
    recorded: &Recorded,
) -> Result<Unwritten> {
    let mut unwritten = Unwritten {
        folded: None,
        pprof: None,
        svg: None,
        written: Vec::new(),
        next_hint: false,
        stdout_closed: None,
    };
    let total: u64 = lines.iter().map(|(_, c)| c).sum();
    if let Some(f) = files.folded {
        if lines.is_empty() {
            unwritten.folded = Some(f.path().to_path_buf());
        } else {
            let path = f.path().to_path_buf();
            f.commit(|w| folded::write(w, lines))?;
            unwritten.written.push(path);
        }
    }
    if let Some(f) = files.svg {
        let mut opts = svg::SvgOptions::for_profile(summary, total, recorded.counts.clone());
        opts.classes = svg::classes(stacks, frames, &settings.folded);
        if lines.is_empty() {
            unwritten.svg = Some(f.path().to_path_buf());
        } else {
            let path = f.path().to_path_buf();
            f.commit(|w| svg::write(w, lines, &opts).map_err(io::Error::other))?;
            unwritten.written.push(path);
        }
    }
    if let Some(f) = files.pprof {
        if lines.is_empty() {
            unwritten.pprof = Some(f.path().to_path_buf());
        } else {
            let meta = pprof_meta(
                settings,
                recorded.event,
                recorded.started_at,
                recorded.elapsed,
                stacks,
            );
            let profile = pprof::build(stacks, frames, &settings.folded, &meta);
            let path = f.path().to_path_buf();
            f.commit(|w| pprof::write(w, &profile))?;
            unwritten.written.push(path);
        }
    }
    if let Some(f) = files.stats_json {
        let path = f.path().to_path_buf();
        f.commit(|w| {
            serde_json::to_writer_pretty(&mut *w, &summary.json())?;
            writeln!(w)
        })?;
        unwritten.written.push(path);
    }
    let annotate = settings.folded.annotate_kernel;
    let written = if settings.folded_stdout {
        folded::write(&mut io::stdout().lock(), lines).context("writing folded stacks to stdout")
    } else if settings.stacks_report {
        report::write(&mut io::stdout().lock(), stacks, None, annotate)
            .context("writing the report")
    } else if !settings.has_output() && total > 0 {
        unwritten.next_hint = true;
        let rows = report::functions(stacks, frames, &settings.folded);
        let unit = match settings.program.mode {
            crate::events::Mode::OnCpu => "samples",
            _ => "us",
        };
        report::write_table(
            &mut io::stdout().lock(),
            &rows,
            total,
            unit,
            report::TABLE_ROWS,
        )
        .context("writing the table of functions")
    } else {
        Ok(())
    };
    match written {
        Err(e) if crate::output::file::is_broken_pipe(&e) => unwritten.stdout_closed = Some(e),
        other => other?,
    }
    Ok(unwritten)
}

/// What a pprof file says about the profile besides its stacks.
pub(crate) fn pprof_meta(
    settings: &ProfileSettings,
    event: Event,
    start: SystemTime,
    elapsed: Duration,
    stacks: &[symbolize::Stack],
) -> pprof::Meta {
    use crate::bpf::profile::Mode;
    use crate::events::sampling::Rate;
    let kind = match settings.program.mode {
        Mode::OffCpu => pprof::Kind::OffCpu,
        Mode::Wall => pprof::Kind::Wall,
        // Timer events count nanoseconds: a sample is worth its period.
        Mode::OnCpu => match (event, settings.rate) {
            (e, Rate::Frequency(hz)) if e.is_clock() => pprof::Kind::CpuTime {
                period_ns: 1_000_000_000 / hz.max(1),
            },
            (e, Rate::Period(n)) if e.is_clock() => pprof::Kind::CpuTime { period_ns: n },
            (e, Rate::Period(n)) => pprof::Kind::Events {
                event: e.to_string(),
                period: Some(n),
            },
            (e, Rate::Frequency(_)) => pprof::Kind::Events {
                event: e.to_string(),
                period: None,
            },
        },
    };
    let how = match settings.program.mode {
        Mode::OffCpu => "off-CPU time".to_string(),
        Mode::Wall => format!(
            "wall-clock time: {event} at {} plus off-CPU time",
            settings.rate
        ),
        Mode::OnCpu => format!("{event} at {}", settings.rate),
    };
    pprof::Meta {
        kind,
        start,
        duration: elapsed,
        comments: vec![format!(
            "bprof {}: {}, {how}",
            env!("CARGO_PKG_VERSION"),
            settings.target.describe()
        )],
        kernel_build_id: pprof::kernel_build_id(),
        cgroups: crate::target::cgroup::paths_of(
            &stacks
                .iter()
                .map(|s| s.cgroup)
                .filter(|&c| c != 0)
                .collect(),
        ),
    }
}

/// The machine as OTLP resources name it: host name, kernel release and
/// architecture, from uname(2), read once.
fn host() -> otlp::Host {
    static HOST: std::sync::OnceLock<otlp::Host> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        // SAFETY: utsname is plain data, filled by the kernel.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer.
        if unsafe { libc::uname(&mut u) } != 0 {
            return otlp::Host::default();
        }
        let field = |f: &[libc::c_char]| {
            let bytes: Vec<u8> = f
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            crate::names::clean(&String::from_utf8_lossy(&bytes)).into_owned()
        };
        let machine = field(&u.machine);
        otlp::Host {
            name: field(&u.nodename),
            kernel_release: field(&u.release),
            // The semantic conventions' names of the common machines.
            arch: match machine.as_str() {
                "x86_64" => "amd64".into(),
                "aarch64" => "arm64".into(),
                "i386" | "i686" => "x86".into(),
                "ppc64le" => "ppc64".into(),
                "s390x" => "s390x".into(),
                _ => machine,
            },
        }
    })
    .clone()
}

/// What an OTLP request says about the profile besides its stacks: the
/// pprof file's facts, the machine, and each process's executable (read
/// now: a process that has exited is named by its comm instead).
pub(crate) fn otlp_meta(
    settings: &ProfileSettings,
    event: Event,
    start: SystemTime,
    elapsed: Duration,
    stacks: &[symbolize::Stack],
) -> otlp::Meta {
    let p = pprof_meta(settings, event, start, elapsed, stacks);
    let pids: std::collections::BTreeSet<u32> = stacks.iter().map(|s| s.tgid).collect();
    otlp::Meta {
        kind: p.kind,
        start,
        duration: elapsed,
        kernel_build_id: p.kernel_build_id,
        cgroups: p.cgroups,
        host: host(),
        service_name: settings.service_name.clone(),
        executables: pids
            .into_iter()
            .filter(|&pid| pid != 0)
            .filter_map(|pid| Some((pid, crate::process::exe_name(pid)?)))
            .collect(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Encodes the profile of `stacks` and queues it for sending; nothing is
/// sent for a profile without samples.
pub(crate) fn push_otlp(
    delivery: &mut otlp::Delivery,
    settings: &ProfileSettings,
    meta: &otlp::Meta,
    stacks: &[symbolize::Stack],
    frames: &symbolize::Frames,
    number: u64,
) {
    let samples: u64 = stacks.iter().map(|s| s.count).sum();
    if samples == 0 {
        return;
    }
    let Some(o) = &settings.otlp else { return };
    let request = otlp::build(stacks, frames, &settings.folded, meta);
    delivery.push(otlp::Payload {
        body: otlp::payload_body(&request, o.gzip),
        samples,
        number,
    });
}
