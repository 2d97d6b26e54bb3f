//! A long profile's aggregated counts, kept on disk while recording.
//!
//! Under a churn of short processes nearly every sample is a new (process,
//! stack) key, so the aggregate grows as long as the profile runs. Past a
//! bound, the collector streams its keys to an unnamed file (`O_TMPFILE` in
//! `/var/tmp`: on disk, no name another user could reach, gone with the
//! descriptor) and starts afresh, as `perf record` streams to perf.data.
//! The copies of stacks the kernel deleted (which later keys may still
//! name by id) go there too, and a key naming one of those refers to it by
//! id. The profile's end reads everything back and merges equal stacks, so
//! recording memory stays bounded by one batch.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{bail, Context, Result};

use crate::bpf::stacks::{FileKey, PyFrame, RawStack, UserFrame, BUILD_ID_SIZE};
use crate::fasthash::HashMap;

/// Where spilled counts go: disk on common installs (`/tmp` may be memory).
const DIR: &str = "/var/tmp";

/// Frames in one stack read back, at most: a bound on a corrupt length.
const MAX_FRAMES: u32 = 1 << 16;

/// Bytes buffered before a write (its capacity is twice that, so the
/// record that crosses it never makes it grow).
const BUFFER: usize = 64 << 10;

const TAG_KEY: u8 = 0;
const TAG_STACK: u8 = 1;

/// A frame of one kind of stack, as the spill file holds it.
pub(crate) trait Frame: Sized + Clone {
    /// Which table a stored stack of these frames goes to.
    const KIND: u8;
    fn put(&self, out: &mut Vec<u8>);
    fn get(r: &mut impl Read) -> Result<Self>;
}

impl Frame for u64 {
    const KIND: u8 = 0;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(r: &mut impl Read) -> Result<Self> {
        u64_of(r)
    }
}

impl Frame for UserFrame {
    const KIND: u8 = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match *self {
            UserFrame::File { build_id, offset } => {
                out.push(0);
                out.extend_from_slice(&build_id);
                out.extend_from_slice(&offset.to_le_bytes());
            }
            UserFrame::FileKey { key, offset } => {
                out.push(1);
                out.extend_from_slice(&key.dev.to_le_bytes());
                out.extend_from_slice(&key.ino.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
            }
            UserFrame::Ip(ip) => {
                out.push(2);
                out.extend_from_slice(&ip.to_le_bytes());
            }
            UserFrame::Truncated(why) => out.extend_from_slice(&[3, why]),
            UserFrame::Elided(n) => {
                out.push(4);
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
    }
    fn get(r: &mut impl Read) -> Result<Self> {
        let [tag] = bytes::<1>(r)?;
        Ok(match tag {
            0 => UserFrame::File {
                build_id: bytes::<BUILD_ID_SIZE>(r)?,
                offset: u64_of(r)?,
            },
            1 => UserFrame::FileKey {
                key: FileKey {
                    dev: u32_of(r)?,
                    ino: u64_of(r)?,
                },
                offset: u64_of(r)?,
            },
            2 => UserFrame::Ip(u64_of(r)?),
            3 => UserFrame::Truncated(bytes::<1>(r)?[0]),
            4 => UserFrame::Elided(u32_of(r)?),
            t => bail!("a user frame of unknown kind {t}"),
        })
    }
}

impl Frame for PyFrame {
    const KIND: u8 = 2;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.code.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.lasti.to_le_bytes());
        out.push(u8::from(self.entry));
    }
    fn get(r: &mut impl Read) -> Result<Self> {
        Ok(PyFrame {
            code: u64_of(r)?,
            id: u64_of(r)?,
            lasti: i32::from_le_bytes(bytes(r)?),
            entry: bytes::<1>(r)?[0] != 0,
        })
    }
}

/// One part of a key: its frames, or the id of a stack written before.
pub(crate) enum Part<'a, F> {
    Frames(&'a [F]),
    Stored(i32),
}

/// One aggregated key, borrowing its stacks.
pub(crate) struct Key<'a> {
    pub tgid: u32,
    pub tid: u32,
    pub cgroup: u64,
    pub comm: String,
    pub count: u64,
    pub kernel_lost: bool,
    pub user_lost: bool,
    pub off_cpu: bool,
    pub kernel: Part<'a, u64>,
    pub user_leaf: Option<UserFrame>,
    pub user: Part<'a, UserFrame>,
    pub python: Part<'a, PyFrame>,
}

/// What the file held at a batch's start, to go back to.
#[derive(Clone, Copy, Default)]
struct Mark {
    bytes: u64,
    keys: u64,
    counts: u64,
}

/// The spill file and what it holds.
pub(crate) struct Spill {
    file: File,
    buf: Vec<u8>,
    /// Written, and buffered.
    now: Mark,
    start: Mark,
    /// Keys written.
    pub keys: u64,
    /// Their counts, summed.
    pub counts: u64,
    /// Batches written.
    pub batches: u64,
    /// A batch could not be taken back: the file is neither written to nor
    /// read any more.
    broken: bool,
}

impl Spill {
    /// A fresh unnamed file in [`DIR`].
    pub fn create() -> Result<Spill> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(DIR)
            .with_context(|| format!("creating an unnamed spill file in {DIR}"))?;
        Ok(Spill {
            file,
            buf: Vec::with_capacity(2 * BUFFER),
            now: Mark::default(),
            start: Mark::default(),
            keys: 0,
            counts: 0,
            batches: 0,
            broken: false,
        })
    }

    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.now.bytes
    }

    /// Starts a batch: [`Spill::commit`] keeps it, [`Spill::rollback`]
    /// takes it back whole.
    pub fn begin(&mut self) {
        self.start = self.now;
    }

    pub fn key(&mut self, k: &Key<'_>) -> Result<()> {
        let out = &mut self.buf;
        out.push(TAG_KEY);
        out.extend_from_slice(&k.tgid.to_le_bytes());
        out.extend_from_slice(&k.tid.to_le_bytes());
        out.extend_from_slice(&k.cgroup.to_le_bytes());
        out.extend_from_slice(&k.count.to_le_bytes());
        let flags = u8::from(k.kernel_lost)
            | u8::from(k.user_lost) << 1
            | u8::from(k.off_cpu) << 2
            | u8::from(k.user_leaf.is_some()) << 3;
        out.push(flags);
        out.extend_from_slice(&(k.comm.len() as u32).to_le_bytes());
        out.extend_from_slice(k.comm.as_bytes());
        put_part(&k.kernel, out);
        if let Some(leaf) = &k.user_leaf {
            leaf.put(out);
        }
        put_part(&k.user, out);
        put_part(&k.python, out);
        self.now.keys += 1;
        self.now.counts += k.count;
        self.flush_if_full()
    }

    /// A stack the kernel no longer holds, under its id.
    pub fn stack<F: Frame>(&mut self, id: i32, frames: &[F]) -> Result<()> {
        self.buf.extend_from_slice(&[TAG_STACK, F::KIND]);
        self.buf.extend_from_slice(&id.to_le_bytes());
        put_frames(frames, &mut self.buf);
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> Result<()> {
        if self.buf.len() >= BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.broken {
            bail!("the spill file could not be cut back after a failed write");
        }
        self.file
            .write_all(&self.buf)
            .context("writing counts to the spill file")?;
        self.now.bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Ends a batch: all of it is in the file.
    pub fn commit(&mut self) -> Result<()> {
        self.flush()?;
        self.keys = self.now.keys;
        self.counts = self.now.counts;
        self.batches += 1;
        Ok(())
    }

    /// Takes the batch back: the file as it was at [`Spill::begin`].
    pub fn rollback(&mut self) {
        self.buf.clear();
        let at = self.start.bytes;
        if self.file.set_len(at).is_err() || self.file.seek(SeekFrom::Start(at)).is_err() {
            self.broken = true;
        }
        self.now = self.start;
    }

    /// Every key written, stacks by id resolved. Its keys and counts
    /// must be those written.
    pub fn read_all(&mut self) -> Result<Vec<RawStack>> {
        if self.broken {
            bail!("the spill file could not be cut back after a failed write");
        }
        self.file
            .seek(SeekFrom::Start(0))
            .context("reading the spill file")?;
        let mut r = BufReader::new((&self.file).take(self.now.bytes));
        let mut stored = Stored::default();
        let mut out = Vec::with_capacity(self.keys as usize);
        loop {
            let mut tag = [0u8];
            match r.read_exact(&mut tag) {
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
                e => e.context("reading the spill file")?,
            }
            match tag[0] {
                TAG_KEY => out.push(read_key(&mut r, &stored).context("reading the spill file")?),
                TAG_STACK => stored.read(&mut r).context("reading the spill file")?,
                t => bail!("the spill file holds a record of unknown kind {t}"),
            }
        }
        let counts: u64 = out.iter().map(|s| s.count).sum();
        if out.len() as u64 != self.keys || counts != self.counts {
            bail!(
                "the spill file holds {} keys counting {counts}, {} keys counting {} were written",
                out.len(),
                self.keys,
                self.counts
            );
        }
        Ok(out)
    }
}

/// Stacks read back by id, one table per kind.
#[derive(Default)]
struct Stored {
    kernel: HashMap<i32, Vec<u64>>,
    user: HashMap<i32, Vec<UserFrame>>,
    python: HashMap<i32, Vec<PyFrame>>,
}

impl Stored {
    fn read(&mut self, r: &mut impl Read) -> Result<()> {
        let [kind] = bytes::<1>(r)?;
        let id = i32::from_le_bytes(bytes(r)?);
        match kind {
            u64::KIND => self.kernel.insert(id, get_frames(r)?).map(drop),
            UserFrame::KIND => self.user.insert(id, get_frames(r)?).map(drop),
            PyFrame::KIND => self.python.insert(id, get_frames(r)?).map(drop),
            k => bail!("a stack of unknown kind {k}"),
        };
        Ok(())
    }
}

fn put_frames<F: Frame>(frames: &[F], out: &mut Vec<u8>) {
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    for f in frames {
        f.put(out);
    }
}

fn get_frames<F: Frame>(r: &mut impl Read) -> Result<Vec<F>> {
    (0..len_of(r)?).map(|_| F::get(r)).collect()
}

fn put_part<F: Frame>(p: &Part<'_, F>, out: &mut Vec<u8>) {
    match p {
        Part::Frames(f) => {
            out.push(0);
            put_frames(f, out);
        }
        Part::Stored(id) => {
            out.push(1);
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
}

fn get_part<F: Frame>(r: &mut impl Read, stored: &HashMap<i32, Vec<F>>) -> Result<Vec<F>> {
    let [how] = bytes::<1>(r)?;
    match how {
        0 => get_frames(r),
        1 => {
            let id = i32::from_le_bytes(bytes(r)?);
            match stored.get(&id) {
                Some(f) => Ok(f.clone()),
                None => bail!("a key names stack {id}, which the file does not hold"),
            }
        }
        h => bail!("a stack part of unknown kind {h}"),
    }
}

fn read_key(r: &mut impl Read, stored: &Stored) -> Result<RawStack> {
    let tgid = u32_of(r)?;
    let tid = u32_of(r)?;
    let cgroup = u64_of(r)?;
    let count = u64_of(r)?;
    let [flags] = bytes::<1>(r)?;
    let n = len_of(r)?;
    let mut comm = vec![0u8; n];
    r.read_exact(&mut comm).context("a record ends early")?;
    let comm = String::from_utf8(comm).context("a thread name is not UTF-8")?;
    let kernel = get_part(r, &stored.kernel)?;
    let mut user = Vec::new();
    if flags & 8 != 0 {
        user.push(UserFrame::get(r)?);
    }
    user.extend(get_part(r, &stored.user)?);
    let python = get_part(r, &stored.python)?;
    Ok(RawStack {
        tgid,
        tid,
        cgroup,
        comm,
        kernel,
        user,
        kernel_lost: flags & 1 != 0,
        user_lost: flags & 2 != 0,
        off_cpu: flags & 4 != 0,
        count,
        python,
    })
}

/// Stack ids whose copies the file holds, a bit each: the kernel hands ids
/// out from 0 up and never reuses one, and a long profile names every
/// deleted stack it spilled here (a hash set took ~10 bytes an id).
#[derive(Debug, Default)]
pub(crate) struct IdSet(Vec<u64>);

/// The flag of the deep stack maps' ids (user and Python alike).
const DEEP: u32 = crate::bpf::abi::DEEP_STACK_ID as u32;
const _: () = assert!(crate::bpf::abi::DEEP_STACK_ID == crate::bpf::abi::PY_DEEP_STACK_ID);

impl IdSet {
    /// An id's bit: beside its deep twin's, so a deep id does not spread
    /// the set over 2^30 bits. Negative ids are errors, never a stack's.
    fn bit(id: i32) -> Option<usize> {
        let id = u32::try_from(id).ok()?;
        Some(((id & !DEEP) as usize) << 1 | usize::from(id & DEEP != 0))
    }

    pub(crate) fn insert(&mut self, id: i32) {
        let Some(i) = Self::bit(id) else { return };
        if i / 64 >= self.0.len() {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn contains(&self, id: i32) -> bool {
        Self::bit(id)
            .and_then(|i| self.0.get(i / 64).map(|w| w >> (i % 64) & 1 == 1))
            .unwrap_or(false)
    }
}

/// `a` and `b` as one list: equal stacks (all but the count) summed, each
/// stack moved, not copied.
pub(crate) fn merge(a: Vec<RawStack>, b: Vec<RawStack>) -> Vec<RawStack> {
    let mut sums: HashMap<RawStack, u64> = HashMap::default();
    for mut s in a.into_iter().chain(b) {
        let count = std::mem::take(&mut s.count);
        *sums.entry(s).or_default() += count;
    }
    sums.into_iter()
        .map(|(mut s, count)| {
            s.count = count;
            s
        })
        .collect()
}

fn bytes<const N: usize>(r: &mut impl Read) -> Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b).context("a record ends early")?;
    Ok(b)
}

fn u32_of(r: &mut impl Read) -> Result<u32> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

fn u64_of(r: &mut impl Read) -> Result<u64> {
    Ok(u64::from_le_bytes(bytes(r)?))
}

/// A frame count or a name's length, bounded.
fn len_of(r: &mut impl Read) -> Result<usize> {
    let n = u32_of(r)?;
    if n > MAX_FRAMES {
        bail!("a record holds a length of {n}, at most {MAX_FRAMES} is written");
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_sets_hold_exactly_what_was_inserted() {
        let deep = DEEP as i32;
        let mut set = IdSet::default();
        let ids = [0, 31, 32, 1000, 35_000, deep | 1, deep | 35_000];
        for id in ids {
            set.insert(id);
        }
        set.insert(-5);
        for id in ids {
            assert!(set.contains(id), "{id}");
        }
        for id in [
            -5,
            -1,
            1,
            30,
            33,
            999,
            34_999,
            35_001,
            deep,
            deep | 2,
            i32::MAX,
        ] {
            assert!(!set.contains(id), "{id}");
        }
        // 35,000 ids and their deep twins in ~9 KB.
        assert_eq!(set.0.len(), (35_000 * 2 + 1) / 64 + 1);
    }

    fn user(leaf: u64) -> Vec<UserFrame> {
        vec![
            UserFrame::File {
                build_id: [3; BUILD_ID_SIZE],
                offset: leaf,
            },
            UserFrame::FileKey {
                key: FileKey { dev: 5, ino: 6 },
                offset: 7,
            },
            UserFrame::Ip(8),
            UserFrame::Elided(9),
            UserFrame::Truncated(2),
        ]
    }

    fn python() -> Vec<PyFrame> {
        vec![PyFrame {
            code: 1,
            id: 2,
            lasti: -1,
            entry: true,
        }]
    }

    fn raw(count: u64, leaf: u64) -> RawStack {
        RawStack {
            tgid: 7,
            tid: 8,
            cgroup: 9,
            comm: "wörker".into(),
            kernel: vec![0xffff_ffff_8100_0000, 2],
            user: user(leaf),
            kernel_lost: false,
            user_lost: true,
            off_cpu: true,
            count,
            python: python(),
        }
    }

    /// `raw(count, leaf)` as a key: the user leaf apart, its callers and
    /// the Python frames inline or by id.
    fn key<'a>(count: u64, leaf: u64, callers: &'a [UserFrame], by_id: bool) -> Key<'a> {
        Key {
            tgid: 7,
            tid: 8,
            cgroup: 9,
            comm: "wörker".into(),
            count,
            kernel_lost: false,
            user_lost: true,
            off_cpu: true,
            kernel: Part::Frames(&[0xffff_ffff_8100_0000, 2]),
            user_leaf: Some(user(leaf)[0]),
            user: Part::Frames(callers),
            python: if by_id {
                Part::Stored(40)
            } else {
                Part::Frames(&[])
            },
        }
    }

    #[test]
    fn keys_read_back_as_written_with_stored_stacks_and_merge() {
        let callers = user(0)[1..].to_vec();
        let mut spill = Spill::create().unwrap();
        spill.begin();
        spill.stack(40, &python()).unwrap();
        spill.key(&key(3, 10, &callers, true)).unwrap();
        spill.key(&key(4, 11, &callers, true)).unwrap();
        spill.commit().unwrap();
        spill.begin();
        spill.key(&key(5, 10, &callers, true)).unwrap();
        spill.commit().unwrap();
        // A batch taken back leaves no trace.
        spill.begin();
        spill.key(&key(100, 12, &callers, false)).unwrap();
        spill.rollback();
        let back = spill.read_all().unwrap();
        assert_eq!(back, vec![raw(3, 10), raw(4, 11), raw(5, 10)]);
        let mut merged = merge(vec![raw(1, 11)], back);
        merged.sort_by_key(|s| s.count);
        assert_eq!(merged, vec![raw(5, 11), raw(8, 10)]);
    }

    #[test]
    fn a_cut_or_dangling_record_is_an_error() {
        let callers = user(0)[1..].to_vec();
        let mut spill = Spill::create().unwrap();
        spill.key(&key(1, 1, &callers, false)).unwrap();
        let buf = spill.buf.clone();
        for cut in [1, 5, buf.len() / 2, buf.len() - 1] {
            assert!(
                read_key(&mut &buf[1..cut], &Stored::default()).is_err(),
                "cut at {cut}"
            );
        }
        assert_eq!(
            read_key(&mut &buf[1..], &Stored::default()).unwrap().count,
            1
        );
        // A key naming a stack the file does not hold.
        spill.begin();
        spill.key(&key(1, 1, &callers, true)).unwrap();
        spill.commit().unwrap();
        let e = spill.read_all().unwrap_err();
        assert!(format!("{e:#}").contains("does not hold"), "{e:#}");
    }
}
