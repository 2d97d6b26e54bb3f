//! Root writing its outputs where another user can reach: files, symlinks
//! and FIFOs that nobody (`setpriv`) planted at output paths, `--every`
//! names and folders. Nothing of nobody's is written through or given
//! root's file with dangerous bits, and the profile still reaches the files
//! it may write. Every bprof runs under an outer `timeout -s KILL`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn bounded(args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(args);
    c
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A path in /var/tmp (world-writable, sticky) for this test run.
fn var_tmp(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/var/tmp/bprof-hostile-{}-{tag}",
        std::process::id()
    ))
}

/// Removes a directory tree a test (or nobody) made when the test ends.
struct PlantedDir(PathBuf);

impl Drop for PlantedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The folded lines in the files of `dir` named `*.folded`, by name.
fn folded_files(dir: &Path) -> Vec<(String, Vec<Folded>)> {
    let mut files: Vec<(String, Vec<Folded>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".folded") && !n.starts_with('.'))
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(&n)).unwrap();
            (n, parse_folded(&text))
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

fn sum(lines: &[Folded]) -> u64 {
    lines.iter().map(|l| l.count).sum()
}

#[test]
// Long on purpose: each output flag against the same planted files, then the files bprof may replace.
fn hostile_a_setuid_world_writable_file_planted_at_an_output_path_never_gets_such_bits() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    // nobody's 06777 files at the paths root is about to write, in /var/tmp.
    let flags = ["-o", "--svg", "--pprof", "--stats-json"];
    let planted: Vec<PathBuf> = (0..flags.len())
        .map(|i| var_tmp(&format!("out{i}")))
        .collect();
    let _guards: Vec<Planted> = planted.iter().cloned().map(Planted).collect();
    let list: Vec<String> = planted.iter().map(|p| p.display().to_string()).collect();
    nobody_sh(&format!(
        "for f in {}; do printf planted > $f; chmod 6777 $f; done",
        list.join(" ")
    ));
    for (flag, path) in flags.iter().zip(&planted) {
        let out = run(bounded(&["--no-counts", "-F", "199", flag])
            .arg(path)
            .arg("--")
            .arg(&bin)
            .arg("0.3"));
        let line = assert_one_line_error(&out);
        assert!(
            line.contains("refusing to replace") && line.contains("owned by uid 65534"),
            "{flag}: {line}"
        );
        // Left as nobody made it: not root's, not written.
        let m = std::fs::metadata(path).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (65534, 0o6777), "{flag}");
        assert_eq!(std::fs::read_to_string(path).unwrap(), "planted");
    }

    // The same bits on a file bprof may replace (in root's own directory,
    // a file another user left there; root's own file): the output is
    // root's, with none of them.
    let dir = scratch("hostile_bits");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = dir.join("theirs.folded");
    let mine = dir.join("mine.svg");
    let json = dir.join("stats.json");
    for f in [&theirs, &mine] {
        std::fs::write(f, "old").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o6777)).unwrap();
    }
    run(Command::new("chown").arg("nobody:nogroup").arg(&theirs));
    let out = run(bounded(&["--no-counts", "-F", "199", "-o"])
        .arg(&theirs)
        .arg("--svg")
        .arg(&mine)
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(&bin)
        .arg("0.5"));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let m = std::fs::metadata(&theirs).unwrap();
    assert_eq!(m.uid(), 0);
    assert_eq!(m.mode() & 0o7777, 0o644 & !umask(), "a new file's mode");
    let m = std::fs::metadata(&mine).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o775, "root's own mode less 07002");
    // The summary of a command's profile names its command line: 0600.
    assert_eq!(
        std::fs::metadata(&json).unwrap().mode() & 0o777,
        0o600 & !umask()
    );
    // ... and the outputs hold the whole profile.
    let lines = parse_folded(&std::fs::read_to_string(&theirs).unwrap());
    assert_totals(&err, &lines);
    assert!(with_frame(&lines, "fx_work631", "heavy") > 0, "{lines:?}");
    assert!(std::fs::read_to_string(&mine).unwrap().contains("heavy"));
}

#[test]
// Long on purpose: one nobody-owned directory, then -o through its symlinks, a symlinked folder, and an --every run whose next name is planted.
fn hostile_symlinks_in_a_directory_nobody_owns_are_never_written_through() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    let safe = scratch("hostile_links");
    std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let precious = safe.join("precious");
    std::fs::write(&precious, "precious").unwrap();
    let theirs = var_tmp("links");
    let _gone = PlantedDir(theirs.clone());
    nobody_sh(&format!(
        "mkdir -m 755 {d} && ln -s {p} {d}/out.folded && ln -s {p} {d}/000002.folded && ln -s {s} {d}/sub",
        d = theirs.display(),
        p = precious.display(),
        s = safe.display()
    ));
    // -o through nobody's symlink, and a new file through nobody's
    // symlinked folder: refused before anything runs.
    let out = run(bounded(&["--no-counts", "-o"])
        .arg(theirs.join("out.folded"))
        .arg("1"));
    let line = assert_one_line_error(&out);
    assert!(line.contains("a symlink owned by uid 65534"), "{line}");
    let out = run(bounded(&["--no-counts", "-o"])
        .arg(theirs.join("sub/new.folded"))
        .arg("1"));
    let line = assert_one_line_error(&out);
    assert!(
        line.contains("sub is a symlink owned by uid 65534 in a directory another user owns"),
        "{line}"
    );
    assert!(!safe.join("new.folded").exists());

    // --every into nobody's directory, whose second name nobody planted:
    // that interval's file is lost, said and counted; the others are
    // written, and add up with it to the samples counted.
    let pattern = theirs.join("%n.folded");
    let out = run(bounded(&["--no-counts", "-F", "199", "--every", "1", "-o"])
        .arg(&pattern)
        .arg("--")
        .arg(&bin)
        .arg("3.5"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bprof: interval 2: refusing to write")
            && err.contains("a symlink owned by uid 65534"),
        "{err}"
    );
    assert!(err.contains("the next intervals go on"), "{err}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious");
    let lost = number_before(
        err.lines()
            .find(|l| l.contains("could not be written ("))
            .unwrap(),
        " samples not in them",
    );
    let files = folded_files(&theirs);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"000001.folded") && names.contains(&"000003.folded"),
        "{names:?}\n{err}"
    );
    let written: u64 = files.iter().map(|(_, l)| sum(l)).sum();
    let (samples, dropped, _) = summary_numbers(&err);
    assert_eq!(dropped, 0, "{err}");
    assert!(lost > 0, "{err}");
    assert_eq!(written + lost, samples, "{err}");
    for (n, _) in &files {
        assert_eq!(std::fs::metadata(theirs.join(n)).unwrap().uid(), 0);
    }
}

#[test]
// Long on purpose: nobody's FIFO for -o, --svg and --ready-file with nobody reading, then root's own FIFO with a reader.
fn hostile_a_fifo_at_an_output_path_never_blocks_bprof_or_feeds_its_reader() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    let fifo = var_tmp("fifo");
    let got = var_tmp("fifo-got");
    let _guards = (Planted(fifo.clone()), Planted(got.clone()));
    nobody_sh(&format!("mkfifo -m 666 {}", fifo.display()));
    // nobody reads it, hoping for root's profile.
    let _reader = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["sh", "-c"])
        .arg(format!("exec cat {} > {}", fifo.display(), got.display()))
        .stdin(Stdio::null())
        .spawn_guarded();
    for flag in ["-o", "--svg", "--ready-file"] {
        let t = Instant::now();
        let out = run(bounded(&["--no-counts", "-F", "199", flag])
            .arg(&fifo)
            .arg("--")
            .arg(&bin)
            .arg("2"));
        let line = assert_one_line_error(&out);
        assert!(line.contains("a FIFO owned by uid 65534"), "{flag}: {line}");
        assert!(t.elapsed() < Duration::from_secs(10), "{flag}");
    }
    drop(_reader);
    assert_eq!(
        std::fs::read(&got).unwrap_or_default(),
        b"",
        "the reader got something"
    );

    // Root's own FIFO, with root reading it: written in place, all of it.
    let dir = scratch("hostile_fifo");
    let mine = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&mine)
        .status()
        .unwrap()
        .success());
    let reader = Command::new("cat")
        .arg(&mine)
        .stdout(Stdio::piped())
        .spawn_guarded();
    let out = run(bounded(&["--no-counts", "-F", "199", "-o"])
        .arg(&mine)
        .arg("--")
        .arg(&bin)
        .arg("0.5"));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let read = reader.wait_with_output().unwrap();
    let lines = parse_folded(&String::from_utf8_lossy(&read.stdout));
    assert_totals(&err, &lines);
    assert!(with_frame(&lines, "fx_work631", "heavy") > 0);
}

#[test]
// Long on purpose: a planted name in /var/tmp, then folders made at start and one refused at start.
fn hostile_a_planted_every_name_costs_its_interval_only_and_folders_are_made_at_start() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    // nobody plants the first interval's name in /var/tmp: the run goes on.
    let base = var_tmp("every");
    let planted = PathBuf::from(format!("{}-000001.folded", base.display()));
    let mut guards: Vec<Planted> = (1..=6)
        .map(|n| Planted(PathBuf::from(format!("{}-{n:06}.folded", base.display()))))
        .collect();
    guards.push(Planted(planted.clone()));
    nobody_sh(&format!(
        "printf planted > {p}; chmod 6777 {p}",
        p = planted.display()
    ));
    let out = run(bounded(&["--no-counts", "-F", "199", "--every", "1", "-o"])
        .arg(format!("{}-%n.folded", base.display()))
        .arg("--")
        .arg(&bin)
        .arg("3.5"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bprof: interval 1: refusing to replace")
            && err.contains("owned by uid 65534"),
        "{err}"
    );
    assert!(
        err.contains("bprof: 1 interval files could not be written"),
        "{err}"
    );
    let m = std::fs::metadata(&planted).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (65534, 0o6777));
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted");
    // The other intervals are there, and add up with the lost one.
    let lost = number_before(
        err.lines()
            .find(|l| l.contains("could not be written ("))
            .unwrap(),
        " samples not in them",
    );
    let mut written = 0;
    let mut files = 0;
    for n in [2, 3, 4] {
        let p = PathBuf::from(format!("{}-{n:06}.folded", base.display()));
        let text =
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}\n{err}", p.display()));
        written += sum(&parse_folded(&text));
        files += 1;
    }
    let (samples, dropped, _) = summary_numbers(&err);
    assert_eq!((files, dropped), (3, 0), "{err}");
    assert_eq!(written + lost, samples, "{err}");

    // A missing folder is made at start (0755 less the umask); one behind
    // nobody's symlink is refused at start, in one line, before recording.
    let dir = scratch("hostile_every_dirs");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let made = dir.join("new/deeper");
    let out = run(bounded(&["--no-counts", "-F", "199", "--every", "1", "-o"])
        .arg(made.join("%n.folded"))
        .arg("--")
        .arg(&bin)
        .arg("1.5"));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        std::fs::metadata(&made).unwrap().mode() & 0o777,
        0o755 & !umask()
    );
    let files = folded_files(&made);
    assert!(!files.is_empty(), "{err}");
    let written: u64 = files.iter().map(|(_, l)| sum(l)).sum();
    let (samples, dropped, _) = summary_numbers(&err);
    assert_eq!((written, dropped), (samples, 0), "{err}");

    let theirs = var_tmp("every-link");
    let _gone = Planted(theirs.clone());
    nobody_sh(&format!("ln -s {} {}", dir.display(), theirs.display()));
    let t = Instant::now();
    let out = run(bounded(&["--no-counts", "--every", "1", "-o"])
        .arg(theirs.join("made/%n.folded"))
        .arg("30"));
    let line = assert_one_line_error(&out);
    assert!(
        line.contains("cannot make the output folder") && line.contains("uid 65534"),
        "{line}"
    );
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(!dir.join("made").exists());
}
