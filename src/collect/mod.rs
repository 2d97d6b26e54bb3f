//! Draining the kernel's maps while recording, so nothing counted is lost.
//!
//! The count map is the inner map of a one-slot `ARRAY_OF_MAPS`
//! (`count_slot`). A drain puts a fresh inner map in the slot; the kernel
//! returns from that update only after `synchronize_rcu()`
//! (`maybe_wait_bpf_programs()` in kernel/bpf/syscall.c, for
//! `ARRAY_OF_MAPS`: at the end of `bpf_map_update_value()` in 6.1, after a
//! successful update in `map_update_elem()` in 6.18). perf_event and
//! tracing programs run inside RCU read-side sections, so once it returns no
//! program still holds a value of the old map, which is then read
//! completely and dropped. Its keys are aggregated here,
//! by stack content, into one table for the whole profile.
//!
//! Stack contents are copied into user space the first time a drained key
//! names their id; when a stack map gets half full, every entry it holds is
//! copied and deleted (`lookup_and_delete_batch`). Ids are never reused, so an
//! id still held in the kernel (an LRU cache, a blocked thread's off-CPU
//! record) stays resolvable from the copy.
//!
//! A plain profile's aggregate goes to a spill file after each drain
//! (`spill`), with the copies of the stacks the kernel deleted, and the end
//! merges it back: memory while recording does not grow with the number of
//! processes.

pub mod sideband;
mod spill;

use std::os::fd::AsFd;
use std::rc::Rc;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapHandle};

use crate::bpf::maps::{
    cached_counts, comm_string, create_count_map, flush_count_caches, for_each_entry, get_by_u32,
    install_inner, leaf_frame, parse_kernel_stack, parse_user_stack, read_stats, reset_count_map,
    SampleKey,
};
use crate::bpf::profile::{ProfileOptions, ProfileProgram};
use crate::bpf::stacks::{RawStack, Stats, UserFrame};
use crate::fasthash::{HashMap, HashSet};
use crate::pyframes::PyFrame;

/// Why a drain runs, which decides what happens to the CPUs' count caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// A map nears full: only room is wanted. The caches stay: what they
    /// hold moves into a map when evicted, or is read at the end.
    Room,
    /// An interval ends (`--every`, `bprof top`): it must hold every sample
    /// counted before it, so the caches are emptied into the map first.
    Interval,
    /// The programs are detached: the caches are read here.
    Last,
}

/// An index into one of the collector's tables, or a mark: no entry (not
/// taken, or no stack in that mode, e.g. the kernel stack of a user-mode
/// sample), or one wanted but lost in the kernel (map full). Four bytes, as
/// a key holds four of them and a long profile holds many keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Ref(u32);

impl Ref {
    const NONE: Ref = Ref(u32::MAX);
    const LOST: Ref = Ref(u32::MAX - 1);
    /// A stack whose only copy is in the spill file (see `spill`).
    const SPILLED: Ref = Ref(u32::MAX - 2);

    fn index(self) -> Option<usize> {
        (self.0 < Ref::SPILLED.0).then_some(self.0 as usize)
    }
}

/// A thread's name and cgroup: kept once, as a churn of processes brings
/// many keys and few names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Names {
    comm: [i8; crate::bpf::abi::COMM_LEN],
    cgroup: u64,
}

/// A count's key in user space: 32 bytes, stacks and names by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AggKey {
    tgid: u32,
    tid: u32,
    names: u32,
    off_cpu: bool,
    kernel: Ref,
    /// An unwound user stack's callers.
    user: Ref,
    /// Its leaf, which the kernel's count key holds apart from the stored
    /// callers.
    user_leaf: Ref,
    /// The thread's Python frames (pyframes).
    python: Ref,
}

// A long profile holds a key per (process, stack): keep it this small.
const _: () = assert!(std::mem::size_of::<AggKey>() == 32);

/// Each distinct value once, under a dense id.
struct Table<T> {
    index: HashMap<T, u32>,
    list: Vec<T>,
}

impl<T: Eq + std::hash::Hash + Clone> Table<T> {
    fn new() -> Self {
        Table {
            index: HashMap::default(),
            list: Vec::new(),
        }
    }

    fn id(&mut self, t: T) -> u32 {
        if let Some(&i) = self.index.get(&t) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(t.clone());
        self.index.insert(t, i);
        i
    }
}

/// Each distinct stack content once, shared by every id and key naming it.
type Interner<F> = Table<Rc<[F]>>;

impl<F: Eq + std::hash::Hash> Table<Rc<[F]>> {
    fn intern(&mut self, frames: Vec<F>) -> u32 {
        self.id(frames.into())
    }
}

/// One kind of stack (kernel, user, Python) as copied from its maps: each
/// content once, the kernel's ids of it, and how many entries the kernel
/// deleted from its maps.
struct Stacks<F> {
    contents: Interner<F>,
    ids: HashMap<i32, u32>,
    /// Ids whose entries the kernel deleted (copied first): their copy is
    /// the only one left.
    purged: HashSet<i32>,
    /// Ids of deleted stacks whose copy went to the spill file.
    spilled: spill::IdSet,
    deleted: u64,
    /// Parses one map value.
    parse: fn(&[u8]) -> Vec<F>,
    /// What the maps hold, for errors ("kernel stack").
    what: &'static str,
}

impl<F: Eq + std::hash::Hash + spill::Frame> Stacks<F> {
    fn new(parse: fn(&[u8]) -> Vec<F>, what: &'static str) -> Self {
        Stacks {
            contents: Interner::new(),
            ids: HashMap::default(),
            purged: HashSet::default(),
            spilled: spill::IdSet::default(),
            deleted: 0,
            parse,
            what,
        }
    }

    /// The content of stack `id` (not negative), from `map` unless copied
    /// before; `LOST`, counted in `unresolved`, when the map has none.
    fn resolve(&mut self, map: &dyn MapCore, id: i32, unresolved: &mut u64) -> Result<Ref> {
        if let Some(&c) = self.ids.get(&id) {
            return Ok(Ref(c));
        }
        if self.spilled.contains(id) {
            return Ok(Ref::SPILLED);
        }
        match get_by_u32(map, id as u32).with_context(|| format!("reading a {}", self.what))? {
            Some(bytes) => {
                let c = self.contents.intern((self.parse)(&bytes));
                self.ids.insert(id, c);
                Ok(Ref(c))
            }
            None => {
                *unresolved += 1;
                Ok(Ref::LOST)
            }
        }
    }

    /// Copies every entry of `maps` not copied yet (a batch syscall per
    /// map), and with `delete` deletes them all in the kernel: the number
    /// of entries seen.
    fn copy(&mut self, maps: &[&dyn MapCore], delete: bool) -> Result<u64> {
        let (mut new, mut seen) = (Vec::new(), 0u64);
        for map in maps {
            let vsize = map.value_size() as usize;
            for_each_entry(map.as_fd(), 4, vsize, delete, |k, v| {
                seen += 1;
                let id = i32::from_ne_bytes(k[..4].try_into().unwrap_or_default());
                if delete {
                    self.purged.insert(id);
                }
                if !self.ids.contains_key(&id) {
                    new.push((id, (self.parse)(v)));
                }
            })
            .with_context(|| format!("reading the {} maps", self.what))?;
        }
        if delete {
            self.deleted += seen;
        }
        for (id, frames) in new {
            let c = self.contents.intern(frames);
            self.ids.insert(id, c);
        }
        Ok(seen)
    }

    /// Writes the copies of the stacks the kernel deleted to `spill`.
    fn store_purged(&self, spill: &mut spill::Spill) -> Result<()> {
        for id in &self.purged {
            if let Some(&c) = self.ids.get(id) {
                spill.stack(*id, &self.contents.list[c as usize])?;
            }
        }
        Ok(())
    }

    /// Once [`Stacks::store_purged`]'s batch is in the file: forgets every
    /// copy (the kernel's are read again if named again; the deleted ones
    /// are named by id).
    fn forget(&mut self) {
        for id in self.purged.drain() {
            self.spilled.insert(id);
        }
        self.contents = Interner::new();
        self.ids = HashMap::default();
    }

    /// A key's part of this kind: in-memory frames, or a spilled id.
    fn part(&self, r: Ref, id: i32) -> spill::Part<'_, F> {
        match r.index() {
            Some(i) => spill::Part::Frames(&self.contents.list[i]),
            None if r == Ref::SPILLED => spill::Part::Stored(id),
            None => spill::Part::Frames(&[]),
        }
    }
}

/// What the drains did, for `-v`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DrainStats {
    /// Count maps swapped out and read (the final read included).
    pub drains: u64,
    /// Count-map entries read.
    pub entries: u64,
    /// Runs of `flush_counts`, emptying the CPUs' count caches before drains.
    pub flush_runs: u64,
    /// Keys the count caches still held at the end, read there.
    pub cached_at_end: u64,
    /// Stack-map entries copied to user space and deleted in the kernel.
    pub stacks_deleted: u64,
    /// Drained keys whose stack id had no content (kernel or copy): a bug
    /// if ever non-zero; such samples show a lost stack.
    pub unresolved: u64,
    /// Distinct stack contents held in user space.
    pub contents: u64,
    /// Keys written to the spill file, in how many batches, and its size.
    pub spilled: u64,
    pub spill_batches: u64,
    pub spill_bytes: u64,
}

/// The maps a collector reads, borrowed from the loaded skeleton.
struct Maps<'a> {
    /// The one-slot `ARRAY_OF_MAPS` holding the current count map.
    pub count_slot: &'a dyn MapCore,
    /// Kernel stacks by id.
    pub kern_stacks: &'a dyn MapCore,
    /// User stacks by id: the short ones.
    pub user_stacks: &'a dyn MapCore,
    /// User stacks of more than `SHORT_FRAMES` records, under ids with
    /// `DEEP_STACK_ID` set.
    pub user_stacks_deep: &'a dyn MapCore,
    /// Python stacks by id: the short ones, and the deep ones (ids with
    /// `PY_DEEP_STACK_ID`).
    pub py_stacks: &'a dyn MapCore,
    pub py_stacks_deep: &'a dyn MapCore,
    /// Per CPU, the on-CPU counts of recent keys, ahead of the count map.
    pub count_cache: &'a dyn MapCore,
    /// Empties a CPU's count cache into the count map.
    pub flush_counts: &'a libbpf_rs::ProgramMut<'a>,
}

/// The user-space side of the count and stack maps.
pub(crate) struct Collector {
    size: u32,
    want_kernel: bool,
    want_user: bool,
    agg: HashMap<AggKey, u64>,
    /// The names and user leaves the keys of `agg` name.
    names: Table<Names>,
    leaves: Table<UserFrame>,
    kernel: Stacks<u64>,
    user: Stacks<UserFrame>,
    python: Stacks<PyFrame>,
    keys_at_swap: u64,
    /// The count map in the slot now.
    current: Option<MapHandle>,
    /// The last drained one, emptied: installed at the next swap. Creating
    /// a preallocated map of --stack-storage-size entries at every drain
    /// was most of a recording second's CPU.
    spare: Option<MapHandle>,
    /// Aggregate the threads of a process together.
    merge_threads: bool,
    /// A failed drain was reported.
    warned: bool,
    /// Count-map keys since the swap, kernel, user and Python stacks
    /// stored, at the last tick.
    last_tick: [u64; 4],
    /// Counts handed out by `take_interval`.
    taken: u64,
    /// Each drain's aggregate goes to the spill file (see `spill`).
    spill_drains: bool,
    spill: Option<spill::Spill>,
    /// What the kernel counted into the drained maps, by their own totals.
    map_totals: u64,
    /// What the drains did.
    pub stats: DrainStats,
}

impl Collector {
    /// Puts the first count map (of `size` entries) in `count_slot`; call
    /// before anything is attached.
    pub fn new(
        count_slot: &dyn MapCore,
        size: u32,
        want_kernel: bool,
        want_user: bool,
    ) -> Result<Self> {
        let c = Collector {
            size,
            want_kernel,
            want_user,
            agg: HashMap::default(),
            names: Table::new(),
            leaves: Table::new(),
            kernel: Stacks::new(parse_kernel_stack, "kernel stack"),
            user: Stacks::new(parse_user_stack, "user stack"),
            python: Stacks::new(crate::pyframes::parse_stack, "Python stack"),
            keys_at_swap: 0,
            current: None,
            spare: None,
            merge_threads: false,
            warned: false,
            last_tick: [0; 4],
            taken: 0,
            spill_drains: false,
            spill: None,
            map_totals: 0,
            stats: DrainStats::default(),
        };
        let mut c = c;
        c.swap(count_slot)?;
        Ok(c)
    }

    /// The collector of a loaded profile program: puts its first count map
    /// in the program's slot; call before anything is attached.
    pub fn for_program(prog: &ProfileProgram<'_>, opts: &ProfileOptions) -> Result<Self> {
        let n = opts.stack_storage_size;
        Collector::new(
            &prog.skel.maps.count_slot,
            n,
            opts.kernel_stacks,
            opts.user_stacks,
        )
    }

    /// Installs a fresh count map and returns the previous one, which no
    /// program uses any more once this returns.
    fn swap(&mut self, count_slot: &dyn MapCore) -> Result<Option<MapHandle>> {
        let fresh = match self.spare.take() {
            Some(m) => m,
            None => create_count_map(self.size)?,
        };
        install_inner(count_slot, &fresh)?;
        Ok(self.current.replace(fresh))
    }

    /// Aggregates the threads of each process together (their stacks stay
    /// apart by thread name): for outputs that do not show thread ids, so
    /// that user memory grows with distinct stacks, not with threads.
    pub fn merge_threads(&mut self, yes: bool) {
        self.merge_threads = yes;
    }

    /// After each drain while recording, the aggregate goes to a spill
    /// file read back at [`Collector::finish`], so a long profile's memory
    /// stays bounded (see `spill`); a profile whose maps never fill never
    /// writes one. Not for `--every` or `top`, whose intervals hand their
    /// stacks out anyway.
    pub fn spill_drains(&mut self, yes: bool) {
        self.spill_drains = yes;
    }

    /// Called every tick while recording: drains the maps into user space
    /// when they fill up. Returns the current counters (an error only if
    /// they cannot be read, and then nothing is drained).
    pub fn tick(&mut self, prog: &ProfileProgram<'_>) -> Result<Stats> {
        let stats = read_stats(&prog.skel.maps.profile_stats)?;
        let maps = collector_maps(prog);
        self.drain_if_due(&maps, &stats);
        Ok(stats)
    }

    /// While recording with `--every`: drains now and returns the stacks
    /// counted since the last interval (see [`Collector::take_interval`]).
    pub fn interval(&mut self, prog: &ProfileProgram<'_>) -> Result<Vec<RawStack>> {
        let stats = read_stats(&prog.skel.maps.profile_stats)?;
        let maps = collector_maps(prog);
        self.take_interval(&maps, &stats)
    }

    /// After `detach`: the last drain, then the final counters (consistent
    /// with it, see [`Collector::drain_last`]) and every aggregated stack.
    pub fn finish(&mut self, prog: &ProfileProgram<'_>) -> Result<(Stats, Vec<RawStack>)> {
        let maps = collector_maps(prog);
        self.drain_last(&maps)?;
        let stats = read_stats(&prog.skel.maps.profile_stats)?;
        let live = self.stacks();
        let stacks = match self.spill.as_mut() {
            Some(spill) => spill::merge(live, spill.read_all()?),
            None => live,
        };
        Ok((stats, stacks))
    }

    /// Drains if the count map or a stack map is half full. (No timer: a
    /// drain costs CPU, and a map that fills slowly only takes up
    /// kernel memory it is sized for.) `stats` is a current reading of the
    /// kernel's counters. A failed drain is said once and recording goes
    /// on: what it cost shows as counted losses (a full map) or fails the
    /// final totals check.
    fn drain_if_due(&mut self, maps: &Maps, stats: &Stats) {
        if let Err(e) = self.try_tick(maps, stats) {
            if !self.warned {
                eprintln!("bprof: draining the kernel maps failed: {e:#}");
                self.warned = true;
            }
        }
    }

    fn try_tick(&mut self, maps: &Maps, stats: &Stats) -> Result<()> {
        let keys = stats.count_keys.saturating_sub(self.keys_at_swap);
        let kern_fill = stats.kern_stacks_stored.saturating_sub(self.kernel.deleted);
        let user_fill = stats.user_stacks_stored.saturating_sub(self.user.deleted);
        let py_fill = stats.py.stored.saturating_sub(self.python.deleted);
        // How much each map grew since the last tick: the next tick may
        // bring as much again.
        let now = [
            keys,
            stats.kern_stacks_stored,
            stats.user_stacks_stored,
            stats.py.stored,
        ];
        let grew: Vec<u64> = now
            .iter()
            .zip(&self.last_tick)
            .map(|(n, p)| n.saturating_sub(*p))
            .collect();
        self.last_tick = now;
        let due = |fill: u64, grew: u64| self.due(fill, grew);
        let stacks_full =
            due(kern_fill, grew[1]) || due(user_fill, grew[2]) || due(py_fill, grew[3]);
        if due(keys, grew[0]) || stacks_full {
            // Growth since now is measured from the fresh map.
            self.last_tick[0] = 0;
            // Stacks first: the map nearest full empties soonest, and the
            // drained keys then find their stacks copied (one batch, not a
            // lookup per new id).
            if stacks_full {
                self.purge_stacks(maps)?;
            }
            self.drain(maps, stats.count_keys, Drain::Room)?;
            self.spill_if_due();
        }
        Ok(())
    }

    /// Moves the aggregate to the spill file. A spill that fails keeps
    /// everything in memory from then on (said once).
    fn spill_if_due(&mut self) {
        if !self.spill_drains || self.agg.is_empty() {
            return;
        }
        if self.spill.is_none() {
            match spill::Spill::create() {
                Ok(s) => self.spill = Some(s),
                Err(e) => {
                    eprintln!("bprof: counts stay in memory: {e:#}");
                    self.spill_drains = false;
                    return;
                }
            }
        }
        if let Err(e) = self.spill_in_batch(|c, spill| c.spill_batch(spill)) {
            eprintln!("bprof: counts stay in memory: {e:#}");
            self.spill_drains = false;
            return;
        }
        self.agg = HashMap::default();
        self.names = Table::new();
        self.leaves = Table::new();
        self.kernel.forget();
        self.user.forget();
        self.python.forget();
        give_back_freed();
    }

    /// Streams the aggregate and the deleted stacks' copies to `spill`.
    fn spill_batch(&self, spill: &mut spill::Spill) -> Result<()> {
        // Stacks first: a key may name one by id.
        self.kernel.store_purged(spill)?;
        self.user.store_purged(spill)?;
        self.python.store_purged(spill)?;
        for (k, &count) in &self.agg {
            self.spill_key(spill, k, [0; 3], count)?;
        }
        Ok(())
    }

    /// Writes one key; `ids`: the kernel's ids of its kernel, user and
    /// Python stacks, for those only the file holds.
    fn spill_key(
        &self,
        spill: &mut spill::Spill,
        k: &AggKey,
        ids: [i32; 3],
        count: u64,
    ) -> Result<()> {
        let names = &self.names.list[k.names as usize];
        spill.key(&spill::Key {
            tgid: k.tgid,
            tid: k.tid,
            cgroup: names.cgroup,
            comm: comm_string(&names.comm),
            count,
            kernel_lost: k.kernel == Ref::LOST,
            user_lost: k.user == Ref::LOST,
            off_cpu: k.off_cpu,
            kernel: self.kernel.part(k.kernel, ids[0]),
            user_leaf: k.user_leaf.index().map(|l| self.leaves.list[l]),
            user: self.user.part(k.user, ids[1]),
            python: self.python.part(k.python, ids[2]),
        })
    }

    /// Writes the keys of a drain that name a stack only the spill file
    /// holds, as one batch.
    fn spill_direct(&mut self, direct: &[(AggKey, [i32; 3], u64)]) -> Result<()> {
        self.spill_in_batch(|c, spill| {
            direct
                .iter()
                .try_for_each(|(k, ids, count)| c.spill_key(spill, k, *ids, *count))
        })
    }

    /// One batch of the spill file, written by `write`: kept whole, or
    /// taken back whole if any of it fails.
    fn spill_in_batch(
        &mut self,
        write: impl FnOnce(&Self, &mut spill::Spill) -> Result<()>,
    ) -> Result<()> {
        let Some(mut spill) = self.spill.take() else {
            anyhow::bail!("a key names a spilled stack, but there is no spill file");
        };
        spill.begin();
        let wrote = write(self, &mut spill).and_then(|()| spill.commit());
        if wrote.is_err() {
            spill.rollback();
        }
        self.spill = Some(spill);
        self.note_spill();
        wrote
    }

    fn note_spill(&mut self) {
        if let Some(s) = &self.spill {
            self.stats.spilled = s.keys;
            self.stats.spill_batches = s.batches;
            self.stats.spill_bytes = s.bytes();
        }
    }

    /// A map is drained when half full, or earlier when one more tick
    /// growing as fast as the last one would take it past three quarters.
    fn due(&self, fill: u64, grew: u64) -> bool {
        let size = u64::from(self.size);
        fill * 2 >= size || (fill + grew) * 4 >= size * 3
    }

    /// Swaps the count map out and aggregates all of it. `count_keys`: the
    /// kernel's key counter, read before the swap. At an interval's end the
    /// CPUs' count caches are emptied into the map first; at the last drain
    /// (the programs detached), what they hold is read here instead. (The
    /// keys a flush inserts are counted after `count_keys` was read, so
    /// the next map looks up to 1 024 keys a CPU fuller than it is: a
    /// drain comes that much sooner, nothing is lost.)
    fn drain(&mut self, maps: &Maps, count_keys: u64, why: Drain) -> Result<()> {
        if why == Drain::Interval {
            self.stats.flush_runs += flush_count_caches(maps.flush_counts)?;
        }
        let Some(old) = self.swap(maps.count_slot)? else {
            return Ok(());
        };
        self.keys_at_swap = count_keys;
        self.stats.drains += 1;
        let mut entries = Vec::new();
        // Read and emptied: no program uses it any more (see swap).
        for_each_entry(
            old.as_fd(),
            std::mem::size_of::<SampleKey>(),
            8,
            true,
            |k, v| {
                entries.push((
                    read_key(k),
                    u64::from_ne_bytes(v[..8].try_into().unwrap_or_default()),
                ));
            },
        )
        .context("reading the count map")?;
        // Kept for the next swap; after the last drain there is none.
        if why != Drain::Last && reset_count_map(&old)? {
            self.spare = Some(old);
        }
        self.stats.entries += entries.len() as u64;
        if why == Drain::Last {
            for (key, weight) in cached_counts(maps.count_cache)? {
                self.map_totals += weight;
                self.stats.cached_at_end += 1;
                entries.push((Some(key), weight));
            }
            // Every stack not copied yet, in a few batches: nothing changes
            // them any more.
            self.copy_stacks(maps, false)?;
        }
        // Keys naming a stack whose only copy is in the spill file go there.
        let mut direct = Vec::new();
        for (key, count) in entries {
            let Some(key) = key else { continue };
            if key.kind == crate::bpf::abi::SAMPLE_TOTAL {
                self.map_totals += count;
                self.stats.entries -= 1;
                continue;
            }
            // Stacks of a mode not wanted are not read (-K, -U).
            let kernel = if self.want_kernel {
                self.resolve_kernel(maps.kern_stacks, key.kern_stack_id)?
            } else {
                Ref::NONE
            };
            let user = if self.want_user && key.tgid != 0 {
                self.resolve_user(maps, key.user_stack_id)?
            } else {
                Ref::NONE
            };
            let python = if self.want_user {
                self.resolve_python(maps, key.py_stack_id)?
            } else {
                Ref::NONE
            };
            let names = self.names.id(Names {
                comm: key.comm,
                // Only pprof labels cgroups, and it keeps threads apart.
                cgroup: if self.merge_threads { 0 } else { key.cgroup },
            });
            // A leaf without its stack (lost, or not wanted) is no stack.
            let with_callers = user.index().is_some() || user == Ref::SPILLED;
            let user_leaf = match (with_callers, leaf_frame(&key.user_leaf)) {
                (true, Some(leaf)) => Ref(self.leaves.id(leaf)),
                _ => Ref::NONE,
            };
            let k = AggKey {
                tgid: key.tgid,
                tid: if self.merge_threads {
                    key.tgid
                } else {
                    key.tid
                },
                names,
                off_cpu: key.kind == crate::bpf::abi::SAMPLE_OFF_CPU,
                kernel,
                user,
                user_leaf,
                python,
            };
            if [kernel, user, python].contains(&Ref::SPILLED) {
                let ids = [key.kern_stack_id, key.user_stack_id, key.py_stack_id];
                direct.push((k, ids, count));
                continue;
            }
            *self.agg.entry(k).or_default() += count;
        }
        if !direct.is_empty() {
            self.spill_direct(&direct)?;
        }
        Ok(())
    }

    fn resolve_kernel(&mut self, map: &dyn MapCore, id: i32) -> Result<Ref> {
        match negative(id) {
            Some(r) => Ok(r),
            None => self.kernel.resolve(map, id, &mut self.stats.unresolved),
        }
    }

    fn resolve_user(&mut self, maps: &Maps, id: i32) -> Result<Ref> {
        if let Some(r) = negative(id) {
            return Ok(r);
        }
        let map = if id & crate::bpf::abi::DEEP_STACK_ID != 0 {
            maps.user_stacks_deep
        } else {
            maps.user_stacks
        };
        self.user.resolve(map, id, &mut self.stats.unresolved)
    }

    /// A Python stack id: none (0), lost (negative), or its content.
    fn resolve_python(&mut self, maps: &Maps, id: i32) -> Result<Ref> {
        if id == crate::bpf::abi::PY_STACK_NONE {
            return Ok(Ref::NONE);
        }
        if id < 0 {
            return Ok(Ref::LOST);
        }
        let map = if id & crate::bpf::abi::PY_DEEP_STACK_ID != 0 {
            maps.py_stacks_deep
        } else {
            maps.py_stacks
        };
        self.python.resolve(map, id, &mut self.stats.unresolved)
    }

    /// Copies every entry of both stack maps and deletes it in the kernel.
    fn purge_stacks(&mut self, maps: &Maps) -> Result<()> {
        self.copy_stacks(maps, true)
    }

    /// Copies every entry of the stack maps not copied yet, a batch syscall
    /// per map, and with `delete` deletes them all in the kernel. (Read one
    /// id at a time, the stacks of a profile's last drain would take a
    /// syscall each.)
    fn copy_stacks(&mut self, maps: &Maps, delete: bool) -> Result<()> {
        let mut seen = self.kernel.copy(&[maps.kern_stacks], delete)?;
        seen += self
            .user
            .copy(&[maps.user_stacks, maps.user_stacks_deep], delete)?;
        seen += self
            .python
            .copy(&[maps.py_stacks, maps.py_stacks_deep], delete)?;
        if delete {
            self.stats.stacks_deleted += seen;
        }
        Ok(())
    }

    /// The last drain, once every program is detached: the swap's grace
    /// period also waits out a program still running on another CPU, so
    /// `read_stats` (called after this) sees final counters that match.
    fn drain_last(&mut self, maps: &Maps) -> Result<()> {
        // No program inserts any more: the map in use goes back into its own
        // slot (the update's grace period is what is wanted) rather than a
        // fresh one, whose making would add to every profile's end.
        if self.spare.is_none() {
            if let Some(current) = &self.current {
                self.spare = MapHandle::try_from(current).ok();
            }
        }
        self.drain(maps, 0, Drain::Last)
    }

    /// Every aggregated stack. The sum of the counts is what the drained
    /// maps held.
    fn stacks(&mut self) -> Vec<RawStack> {
        self.stats.contents = (self.kernel.contents.list.len()
            + self.user.contents.list.len()
            + self.python.contents.list.len()) as u64;
        self.agg
            .iter()
            .map(|(k, &count)| {
                let names = &self.names.list[k.names as usize];
                let mut user = Vec::new();
                if let Some(i) = k.user.index() {
                    user.extend(k.user_leaf.index().map(|l| self.leaves.list[l]));
                    user.extend_from_slice(&self.user.contents.list[i]);
                }
                RawStack {
                    tgid: k.tgid,
                    tid: k.tid,
                    cgroup: names.cgroup,
                    comm: comm_string(&names.comm),
                    kernel: frames(k.kernel, &self.kernel.contents.list),
                    user,
                    kernel_lost: k.kernel == Ref::LOST,
                    user_lost: k.user == Ref::LOST,
                    off_cpu: k.off_cpu,
                    count,
                    python: frames(k.python, &self.python.contents.list),
                }
            })
            .collect()
    }

    /// The sum of every count drained: still aggregated, spilled, or
    /// handed out by [`Collector::take_interval`].
    pub fn total(&self) -> u64 {
        let spilled = self.spill.as_ref().map_or(0, |s| s.counts);
        self.taken + spilled + self.agg.values().sum::<u64>()
    }

    /// What the kernel counted into the maps drained so far, by each map's
    /// own total (kept only with `ProfileOptions::map_totals`; else 0):
    /// exactly [`Collector::total`] unless a drain missed
    /// entries. The global counters (`Stats`) only match at the end: while
    /// a swap waits for its grace period, samples already count into the
    /// fresh map and bump them.
    pub fn counted_in_drained(&self) -> u64 {
        self.map_totals
    }

    /// Ends one interval of a periodic profile (`--every`): drains the
    /// count map now and hands out every stack aggregated since the last
    /// interval, forgetting them, so user memory stays flat over a long
    /// run. Stack contents stay interned (an id may be named again).
    /// `stats`: a current reading of the kernel's counters.
    fn take_interval(&mut self, maps: &Maps, stats: &Stats) -> Result<Vec<RawStack>> {
        self.last_tick[0] = 0;
        self.drain(maps, stats.count_keys, Drain::Interval)?;
        let stacks = self.stacks();
        self.taken += stacks.iter().map(|s| s.count).sum::<u64>();
        self.agg = HashMap::default();
        self.names = Table::new();
        self.leaves = Table::new();
        Ok(stacks)
    }
}

/// Returns the heap pages freed by a spill to the system: the batch was
/// allocated in many small pieces among longer-lived ones, and without
/// this the process keeps the high-water mark of every drain.
fn give_back_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The frames a key's stack reference names (none for a mark).
fn frames<F: Clone>(r: Ref, list: &[Rc<[F]>]) -> Vec<F> {
    r.index().map_or(Vec::new(), |i| list[i].to_vec())
}

/// The count and stack maps the collector drains, lent from the program's
/// skeleton.
fn collector_maps<'a>(prog: &'a ProfileProgram<'_>) -> Maps<'a> {
    let skel = &prog.skel;
    Maps {
        count_slot: &skel.maps.count_slot,
        kern_stacks: &skel.maps.kern_stacks,
        user_stacks: &skel.maps.user_stacks,
        user_stacks_deep: &skel.maps.user_stacks_deep,
        py_stacks: &skel.maps.py_stacks,
        py_stacks_deep: &skel.maps.py_stacks_deep,
        count_cache: &skel.maps.count_cache,
        flush_counts: prog.flush_program(),
    }
}

/// The invariant every profile ends with: what the outputs hold equals
/// what the kernel counted (it counts samples lost to a full count map
/// apart, and those are reported). `None` when it holds, else the message.
pub(crate) fn check_totals(stats: &Stats, drained: u64, lines: &[(String, u64)]) -> Option<String> {
    let out: u64 = lines.iter().map(|(_, c)| c).sum();
    (out != stats.counted_weight || drained != stats.counted_weight).then(|| {
        format!(
            "accounting error: the outputs hold {out} and the drained count maps {drained}, but the kernel counted {} ({} samples, {} lost to a full count map)",
            stats.counted_weight, stats.counted, stats.count_map_full
        )
    })
}

/// The `-v` line about drains.
pub(crate) fn describe(d: &DrainStats, stats: &Stats) -> String {
    format!(
        "{} drains read {} count-map entries (the CPUs' count caches emptied into them in {} runs, {} keys read from them at the end); {} kernel and {} user stacks stored, {} copied and deleted from the kernel, {} distinct contents kept; {} hash collisions; {} unresolved",
        d.drains,
        d.entries,
        d.flush_runs,
        d.cached_at_end,
        stats.kern_stacks_stored,
        stats.user_stacks_stored,
        d.stacks_deleted,
        d.contents,
        stats.stack_collisions,
        d.unresolved
    ) + &if d.spilled > 0 {
        format!(
            "; {} keys spilled to disk in {} batches ({:.1} MiB)",
            d.spilled,
            d.spill_batches,
            d.spill_bytes as f64 / (1 << 20) as f64
        )
    } else {
        String::new()
    }
}

/// -EFAULT means "no stack in that mode" (e.g. the kernel stack of a
/// user-mode sample); -1 means "not taken"; any other negative id is a
/// lost stack. `None` for a real id.
fn negative(id: i32) -> Option<Ref> {
    match id {
        0.. => None,
        -1 => Some(Ref::NONE),
        e if e == -libc::EFAULT => Some(Ref::NONE),
        _ => Some(Ref::LOST),
    }
}

fn read_key(bytes: &[u8]) -> Option<SampleKey> {
    crate::bpf::abi::read_plain::<SampleKey>(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_mismatch_is_reported() {
        let stats = Stats {
            counted: 10,
            counted_weight: 10,
            ..Default::default()
        };
        let lines = vec![("a;b".to_string(), 6), ("a;c".to_string(), 4)];
        assert_eq!(check_totals(&stats, 10, &lines), None);
        let msg = check_totals(&stats, 10, &lines[..1]).unwrap();
        assert!(
            msg.contains("outputs hold 6") && msg.contains("counted 10"),
            "{msg}"
        );
        assert!(check_totals(&stats, 9, &lines).is_some());
    }
}
