//! The live view of `bprof top`: what one refresh shows (hottest functions
//! by self and total share, or whole stacks; processes; threads), the keys
//! that change it, and drawing it with ratatui.
//!
//! Each refresh shows the counts of the last interval only (no decay), so a
//! number on screen is always "samples in the last N seconds".

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;

/// Frames root first, leaf last.
pub type Frames = Rc<[Rc<str>]>;

/// One symbolized stack of an interval.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: Rc<str>,
    /// Frames root first, leaf last, named as in folded output.
    pub frames: Frames,
    /// The module of each frame (`[kernel]`, a file name), as the
    /// profile's table shows it; empty for markers.
    pub modules: Frames,
    /// Samples, or microseconds (off-CPU, `--wall`).
    pub count: u64,
}

/// What one refresh brings.
#[derive(Debug, Clone, Default)]
pub struct Interval {
    /// Its stacks.
    pub samples: Vec<Sample>,
    /// Its length in seconds.
    pub seconds: f64,
    /// Since the start: what the kernel counted into the count maps drained
    /// so far (each map's own total), what reached the view, and what was
    /// lost to a full count map. `counted` equals `shown` unless the view
    /// dropped something.
    pub counted: u64,
    /// See `counted`.
    pub shown: u64,
    /// See `counted`.
    pub lost: u64,
}

/// Order of the function rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Self share, highest first.
    SelfShare,
    /// Total share, highest first.
    Total,
    /// Function name.
    Name,
}

/// What the main table lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Functions with self and total share.
    Functions,
    /// Whole stacks.
    Stacks,
}

/// What a key asks of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// The view changed: draw it again.
    Redraw,
    /// Quit.
    Quit,
}

/// One function's share of an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncRow {
    /// Its name.
    pub name: Rc<str>,
    /// Its module.
    pub module: Rc<str>,
    /// Counts where it is the leaf.
    pub self_count: u64,
    /// Counts of stacks it is on (once per stack, however often it recurses).
    pub total: u64,
}

/// One process's or thread's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    /// Process id (for a thread: its process).
    pub tgid: u32,
    /// Thread id (for a process: its id).
    pub tid: u32,
    /// Its name.
    pub comm: Rc<str>,
    /// Its counts.
    pub count: u64,
}

fn narrowed(samples: &[Sample], pid: Option<u32>) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |s| pid.is_none_or(|p| s.tgid == p))
}

/// Self and total counts per function, sorted.
pub fn functions(samples: &[Sample], pid: Option<u32>, sort: SortBy) -> Vec<FuncRow> {
    let none: Rc<str> = Rc::from("");
    let module = |s: &Sample, i: usize| s.modules.get(i).cloned().unwrap_or_else(|| none.clone());
    let mut by: HashMap<(Rc<str>, Rc<str>), (u64, u64)> = HashMap::new();
    let mut on_stack: HashSet<(Rc<str>, Rc<str>)> = HashSet::new();
    for s in narrowed(samples, pid) {
        let Some(leaf) = s.frames.last() else {
            continue;
        };
        let last = s.frames.len() - 1;
        by.entry((leaf.clone(), module(s, last))).or_default().0 += s.count;
        on_stack.clear();
        for (i, f) in s.frames.iter().enumerate() {
            let key = (f.clone(), module(s, i));
            if on_stack.insert(key.clone()) {
                by.entry(key).or_default().1 += s.count;
            }
        }
    }
    let mut rows: Vec<FuncRow> = by
        .into_iter()
        .map(|((name, module), (self_count, total))| FuncRow {
            name,
            module,
            self_count,
            total,
        })
        .collect();
    match sort {
        SortBy::SelfShare => rows.sort_by(|a, b| {
            (b.self_count, b.total)
                .cmp(&(a.self_count, a.total))
                .then_with(|| a.name.cmp(&b.name))
        }),
        SortBy::Total => rows.sort_by(|a, b| {
            (b.total, b.self_count)
                .cmp(&(a.total, a.self_count))
                .then_with(|| a.name.cmp(&b.name))
        }),
        SortBy::Name => rows.sort_by(|a, b| a.name.cmp(&b.name)),
    }
    rows
}

/// Whole stacks (threads of a process merged), hottest first.
pub fn stacks(samples: &[Sample], pid: Option<u32>) -> Vec<(Rc<str>, Frames, u64)> {
    let mut by: HashMap<(Rc<str>, Frames), u64> = HashMap::new();
    for s in narrowed(samples, pid) {
        *by.entry((s.comm.clone(), s.frames.clone())).or_default() += s.count;
    }
    let mut rows: Vec<_> = by.into_iter().map(|((c, f), n)| (c, f, n)).collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    rows
}

/// Counts per process, hottest first; a process is named by its main
/// thread when that was sampled, else by its busiest thread.
pub fn processes(samples: &[Sample]) -> Vec<TaskRow> {
    #[derive(Default)]
    struct Acc {
        count: u64,
        main: Option<Rc<str>>,
        comms: HashMap<Rc<str>, u64>,
    }
    let mut by: HashMap<u32, Acc> = HashMap::new();
    for s in samples {
        let e = by.entry(s.tgid).or_default();
        e.count += s.count;
        if s.tid == s.tgid {
            e.main = Some(s.comm.clone());
        }
        *e.comms.entry(s.comm.clone()).or_default() += s.count;
    }
    let mut rows: Vec<TaskRow> = by
        .into_iter()
        .map(|(tgid, Acc { count, main, comms })| TaskRow {
            tgid,
            tid: tgid,
            comm: main.unwrap_or_else(|| {
                comms
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
                    .map(|(c, _)| c)
                    .unwrap_or_else(|| Rc::from("?"))
            }),
            count,
        })
        .collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.tgid.cmp(&b.tgid)));
    rows
}

/// Counts per thread (of one process, or all), hottest first.
pub fn threads(samples: &[Sample], pid: Option<u32>) -> Vec<TaskRow> {
    let mut by: HashMap<(u32, u32), (u64, Rc<str>)> = HashMap::new();
    for s in narrowed(samples, pid) {
        let e = by
            .entry((s.tgid, s.tid))
            .or_insert_with(|| (0, s.comm.clone()));
        e.0 += s.count;
    }
    let mut rows: Vec<TaskRow> = by
        .into_iter()
        .map(|((tgid, tid), (count, comm))| TaskRow {
            tgid,
            tid,
            comm,
            count,
        })
        .collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.tid.cmp(&b.tid)));
    rows
}

/// The view's state: the data shown and how.
pub struct View {
    /// Function order.
    pub sort: SortBy,
    /// Functions or stacks.
    pub show: Show,
    /// Frozen: refreshes are taken (and counted) but not shown.
    pub paused: bool,
    /// Narrowed to this process.
    pub pid: Option<u32>,
    /// Picking a process: the selected row of the process table.
    picking: Option<usize>,
    /// First row shown of the main table.
    scroll: usize,
    data: Interval,
    /// Event, rate and target, for the title.
    title: String,
    /// What a count is ("samples", "us").
    unit: &'static str,
    refreshes: u64,
    /// Keys are read (bprof is the terminal's foreground process).
    pub keys: bool,
}

impl View {
    /// An empty view until the first refresh.
    pub fn new(title: String, unit: &'static str) -> View {
        View {
            sort: SortBy::SelfShare,
            show: Show::Functions,
            paused: false,
            pid: None,
            picking: None,
            scroll: 0,
            data: Interval::default(),
            title,
            unit,
            refreshes: 0,
            keys: true,
        }
    }

    /// A new interval (ignored while paused).
    pub fn update(&mut self, data: Interval) {
        if !self.paused {
            self.data = data;
            self.refreshes += 1;
        }
    }

    /// Handles one key.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.modifiers.contains(KeyModifiers::CONTROL) {
            return match k.code {
                // Raw mode turns Ctrl-C into a key, not SIGINT.
                KeyCode::Char('c') => Action::Quit,
                _ => Action::None,
            };
        }
        if let Some(sel) = self.picking {
            let n = processes(&self.data.samples).len();
            match k.code {
                KeyCode::Up => self.picking = Some(sel.saturating_sub(1)),
                KeyCode::Down => self.picking = Some((sel + 1).min(n.saturating_sub(1))),
                KeyCode::Enter => {
                    self.pid = processes(&self.data.samples).get(sel).map(|r| r.tgid);
                    self.picking = None;
                    self.scroll = 0;
                }
                KeyCode::Esc => self.picking = None,
                KeyCode::Char('q') => return Action::Quit,
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return Action::Quit,
            KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('s') => {
                self.sort = match self.sort {
                    SortBy::SelfShare => SortBy::Total,
                    SortBy::Total => SortBy::Name,
                    SortBy::Name => SortBy::SelfShare,
                };
                self.scroll = 0;
            }
            KeyCode::Char('f') => {
                self.show = match self.show {
                    Show::Functions => Show::Stacks,
                    Show::Stacks => Show::Functions,
                };
                self.scroll = 0;
            }
            KeyCode::Char('p') | KeyCode::Enter => {
                let rows = processes(&self.data.samples);
                let at = self
                    .pid
                    .and_then(|p| rows.iter().position(|r| r.tgid == p))
                    .unwrap_or(0);
                self.picking = Some(at);
            }
            KeyCode::Esc | KeyCode::Char('a') => {
                self.pid = None;
                self.scroll = 0;
            }
            KeyCode::Up => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::Down => self.scroll += 1,
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::PageDown => self.scroll += 10,
            KeyCode::Home => self.scroll = 0,
            _ => return Action::None,
        }
        Action::Redraw
    }

    /// Draws the whole screen.
    pub fn draw(&self, f: &mut Frame) {
        let area = f.area();
        let bottom = (area.height / 3).clamp(3, 12);
        let rows = Layout::default()
            .direction(Direction::Vertical)
            .constraints([
                Constraint::Length(2),
                Constraint::Min(3),
                Constraint::Length(bottom),
                Constraint::Length(1),
            ])
            .split(area);
        f.render_widget(Paragraph::new(self.header()), rows[0]);
        match self.show {
            Show::Functions => self.draw_functions(f, rows[1]),
            Show::Stacks => self.draw_stacks(f, rows[1]),
        }
        let halves = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(50), Constraint::Percentage(50)])
            .split(rows[2]);
        self.draw_processes(f, halves[0]);
        self.draw_threads(f, halves[1]);
        let help = if !self.keys {
            "no keys: not the terminal's foreground process (fg brings it there); it ends at its DURATION or a signal"
        } else if self.picking.is_some() {
            "Up/Down choose a process  Enter narrow to it  Esc cancel  q quit"
        } else {
            "q quit  space pause  s sort  f functions/stacks  p pick process  Esc all  Up/Down scroll"
        };
        f.render_widget(
            Paragraph::new(help).style(Style::new().add_modifier(Modifier::REVERSED)),
            rows[3],
        );
    }

    fn total(&self) -> u64 {
        narrowed(&self.data.samples, self.pid)
            .map(|s| s.count)
            .sum()
    }

    fn header(&self) -> Vec<Line<'static>> {
        let d = &self.data;
        let scope = match self.pid {
            Some(p) => format!("pid {p}"),
            None => "all".to_string(),
        };
        let sort = match self.sort {
            SortBy::SelfShare => "self",
            SortBy::Total => "total",
            SortBy::Name => "name",
        };
        let paused = if self.paused { "  [PAUSED]" } else { "" };
        vec![
            Line::from(format!("bprof top: {}{paused}", self.title)),
            Line::from(format!(
                "last {:.1} s: {} {} ({scope})  since start: {} counted, {} shown, {} lost  sort: {sort}",
                d.seconds,
                self.total(),
                self.unit,
                d.counted,
                d.shown,
                d.lost
            )),
        ]
    }

    fn draw_functions(&self, f: &mut Frame, area: Rect) {
        let rows = functions(&self.data.samples, self.pid, self.sort);
        let total = self.total().max(1) as f64;
        let height = area.height.saturating_sub(3) as usize;
        let shown: Vec<&FuncRow> = rows.iter().skip(self.scroll).take(height).collect();
        // As wide as the longest module shown, within bounds.
        let module_width = shown
            .iter()
            .map(|r| r.module.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(6, 20);
        let body = shown.into_iter().map(|r| {
            Row::new(vec![
                format!("{:5.1}%", r.self_count as f64 * 100.0 / total),
                format!("{:5.1}%", r.total as f64 * 100.0 / total),
                r.self_count.to_string(),
                r.total.to_string(),
                cut_left(&r.module, module_width),
                r.name.to_string(),
            ])
        });
        let table = Table::new(
            body,
            [
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(module_width as u16),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec![
                "SELF%", "TOTAL%", "SELF", "TOTAL", "MODULE", "FUNCTION",
            ])
            .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(format!(" functions ({} rows) ", rows.len())));
        f.render_widget(table, area);
    }

    fn draw_stacks(&self, f: &mut Frame, area: Rect) {
        let rows = stacks(&self.data.samples, self.pid);
        let total = self.total().max(1) as f64;
        let height = area.height.saturating_sub(3) as usize;
        // The leaf end matters most: cut long stacks on the root side.
        let width = (area.width as usize).saturating_sub(2 + 7 + 9 + 2);
        let body = rows
            .iter()
            .skip(self.scroll)
            .take(height)
            .map(|(comm, frames, n)| {
                let mut text = comm.to_string();
                for fr in frames.iter() {
                    text.push(';');
                    text.push_str(fr);
                }
                Row::new(vec![
                    format!("{:5.1}%", *n as f64 * 100.0 / total),
                    n.to_string(),
                    cut_left(&text, width),
                ])
            });
        let table = Table::new(
            body,
            [
                Constraint::Length(7),
                Constraint::Length(9),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec!["SHARE", "COUNT", "STACK (comm;root;...;leaf)"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(format!(" stacks ({} rows) ", rows.len())));
        f.render_widget(table, area);
    }

    fn draw_processes(&self, f: &mut Frame, area: Rect) {
        let rows = processes(&self.data.samples);
        let total: u64 = rows.iter().map(|r| r.count).sum();
        let total = total.max(1) as f64;
        let height = area.height.saturating_sub(3) as usize;
        // Keep the picked row on screen.
        let first = self
            .picking
            .map_or(0, |sel| (sel + 1).saturating_sub(height));
        let body = rows
            .iter()
            .enumerate()
            .skip(first)
            .take(height)
            .map(|(i, r)| {
                let mark = if Some(r.tgid) == self.pid { "*" } else { " " };
                let row = Row::new(vec![
                    format!("{mark}{}", r.tgid),
                    format!("{:5.1}%", r.count as f64 * 100.0 / total),
                    r.comm.to_string(),
                ]);
                if self.picking == Some(i) {
                    row.style(Style::new().add_modifier(Modifier::REVERSED))
                } else {
                    row
                }
            });
        let title = if self.picking.is_some() {
            " processes: pick one (Enter) "
        } else {
            " processes "
        };
        let table = Table::new(
            body,
            [
                Constraint::Length(9),
                Constraint::Length(7),
                Constraint::Min(4),
            ],
        )
        .header(
            Row::new(vec![" PID", "SHARE", "COMM"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(title));
        f.render_widget(table, area);
    }

    fn draw_threads(&self, f: &mut Frame, area: Rect) {
        let rows = threads(&self.data.samples, self.pid);
        let total = self.total().max(1) as f64;
        let height = area.height.saturating_sub(3) as usize;
        let body = rows.iter().take(height).map(|r| {
            Row::new(vec![
                r.tid.to_string(),
                r.tgid.to_string(),
                format!("{:5.1}%", r.count as f64 * 100.0 / total),
                r.comm.to_string(),
            ])
        });
        let title = match self.pid {
            Some(p) => format!(" threads of {p} "),
            None => " threads ".to_string(),
        };
        let table = Table::new(
            body,
            [
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(7),
                Constraint::Min(4),
            ],
        )
        .header(
            Row::new(vec!["TID", "PID", "SHARE", "COMM"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(title));
        f.render_widget(table, area);
    }
}

/// `text` cut to its last `width` characters, marked with `..` where cut.
fn cut_left(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width || width < 3 {
        return text.to_string();
    }
    let keep: String = text.chars().skip(n - (width - 2)).collect();
    format!("..{keep}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tgid: u32, tid: u32, comm: &str, frames: &[&str], count: u64) -> Sample {
        Sample {
            tgid,
            tid,
            comm: Rc::from(comm),
            frames: frames.iter().map(|f| Rc::from(*f)).collect(),
            modules: frames.iter().map(|_| Rc::from("a.out")).collect(),
            count,
        }
    }

    #[test]
    fn self_and_total_shares_count_each_stack_once() {
        let s = vec![
            sample(1, 1, "a", &["main", "heavy"], 6),
            sample(1, 2, "a", &["main", "medium"], 3),
            // Recursion: rec counts once in total.
            sample(1, 1, "a", &["main", "rec", "rec"], 1),
            sample(2, 2, "b", &["other"], 5),
        ];
        let f = functions(&s, Some(1), SortBy::Total);
        assert_eq!(f[0].name.as_ref(), "main");
        assert_eq!((f[0].self_count, f[0].total), (0, 10));
        let get = |n: &str| f.iter().find(|r| r.name.as_ref() == n).unwrap().clone();
        assert_eq!((get("heavy").self_count, get("heavy").total), (6, 6));
        assert_eq!((get("rec").self_count, get("rec").total), (1, 1));
        assert!(f.iter().all(|r| r.name.as_ref() != "other"));
        let by_self = functions(&s, None, SortBy::SelfShare);
        assert_eq!(by_self[0].name.as_ref(), "heavy");
        assert_eq!(by_self[1].name.as_ref(), "other");
        let by_name = functions(&s, None, SortBy::Name);
        assert_eq!(by_name[0].name.as_ref(), "heavy");

        let p = processes(&s);
        assert_eq!((p[0].tgid, p[0].count, p[0].comm.as_ref()), (1, 10, "a"));
        let t = threads(&s, Some(1));
        assert_eq!((t[0].tid, t[0].count), (1, 7));
        assert_eq!(t.len(), 2);
        let st = stacks(&s, None);
        assert_eq!(st[0].2, 6);
        assert_eq!(st.iter().map(|r| r.2).sum::<u64>(), 15);
    }

    #[test]
    fn keys_change_the_view() {
        let mut v = View::new(String::new(), "samples");
        v.update(Interval {
            samples: vec![sample(7, 7, "x", &["f"], 1), sample(9, 9, "y", &["g"], 5)],
            ..Default::default()
        });
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert_eq!(v.key(key(KeyCode::Char('s'))), Action::Redraw);
        assert_eq!(v.sort, SortBy::Total);
        v.key(key(KeyCode::Char('f')));
        assert_eq!(v.show, Show::Stacks);
        v.key(key(KeyCode::Char('p')));
        v.key(key(KeyCode::Down));
        v.key(key(KeyCode::Enter));
        assert_eq!(v.pid, Some(7), "the second-hottest process");
        v.key(key(KeyCode::Esc));
        assert_eq!(v.pid, None);
        v.key(key(KeyCode::Char(' ')));
        assert!(v.paused);
        v.update(Interval::default());
        assert_eq!(v.data.samples.len(), 2, "paused: the data stays");
        assert_eq!(v.key(key(KeyCode::Char('q'))), Action::Quit);
        assert_eq!(
            v.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
    }

    #[test]
    fn long_stacks_keep_their_leaf() {
        assert_eq!(cut_left("a;b;c;leaf", 6), "..leaf");
        assert_eq!(cut_left("short", 10), "short");
    }
}
