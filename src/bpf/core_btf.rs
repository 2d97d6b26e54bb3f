//! The kernel types libbpf relocates the profile program against (CO-RE),
//! kept per boot.
//!
//! Without help, libbpf parses the kernel's whole BTF at every load and
//! searches all of it once for each struct the program reads: a large part
//! of every profile's start (BENCHMARKS.md). The first profile of a
//! boot copies the types the program's own BTF names (structs, unions,
//! enums and typedefs, each with every member at its offset, and what they
//! embed; a pointer becomes `void *`, which CO-RE's field checks accept for
//! any pointer) into root's state directory; later profiles hand libbpf that
//! file (`btf_custom_path`). A load that fails with it is retried with the
//! kernel's BTF and the file is removed.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys as sys;

use crate::bpf::shared_counters::STATE_DIR;

/// The profile object's hash, from build.rs: a new build gets a new file.
const OBJECT_HASH: &str = env!("BPROF_PROFILE_OBJECT_HASH");
/// What the copy holds and how: a change to the copier gets a new file.
const FORMAT: &str = "bprof-core-btf 2";
/// A kept file is read like any other input: bounded.
const MAX_BYTES: u64 = 16 << 20;

/// What the load did for its kernel types (`-v` says it).
#[derive(Debug)]
pub(crate) enum Use {
    /// Read from the kernel's BTF; `kept` says where the copy went, or why not.
    Kernel { kept: Result<(String, usize)> },
    /// Read from the copy kept earlier this boot.
    Kept(String),
    /// The kept copy failed the load and was removed; the kernel's BTF
    /// served, and `kept` says where a new copy went.
    Refused {
        path: String,
        kept: Result<(String, usize)>,
    },
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = |f: &mut std::fmt::Formatter<'_>, kept: &Result<(String, usize)>| match kept {
            Ok((path, n)) => write!(f, "{n} of its types kept in {path} for the next profiles"),
            Err(why) => write!(f, "no copy kept: {why:#}"),
        };
        match self {
            Use::Kernel { kept: k } => {
                write!(f, "from the kernel's BTF; ")?;
                kept(f, k)
            }
            Use::Kept(path) => write!(f, "from {path}, kept earlier this boot"),
            Use::Refused { path, kept: k } => {
                write!(
                    f,
                    "from the kernel's BTF: the load failed with {path}, which was removed; "
                )?;
                kept(f, k)
            }
        }
    }
}

/// A kept copy, open: libbpf reads it through `/proc/self/fd`, so the file
/// checked is the file read.
pub(crate) struct Kept {
    checked: crate::fsafe::Checked,
    name: String,
}

impl Kept {
    /// The copy for this build and boot, when root's state directory holds
    /// one that is a regular file of root's, mode 0600, of a sane size.
    pub(crate) fn find() -> Option<Kept> {
        use std::os::unix::fs::MetadataExt;
        crate::fsafe::private_dir(Path::new(STATE_DIR)).ok()?;
        let name = file_name()?;
        if is_refused(&name) {
            return None;
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let path = Path::new(STATE_DIR).join(&name);
        let checked =
            crate::fsafe::open_untrusted(&path, crate::fsafe::Owner::Exactly(me), MAX_BYTES)
                .ok()?;
        let meta = checked.file.metadata().ok()?;
        (meta.mode() & 0o077 == 0 && meta.len() > 0).then_some(Kept { checked, name })
    }

    /// The path libbpf opens.
    pub(crate) fn proc_path(&self) -> CString {
        CString::new(self.checked.fd_path().into_os_string().into_encoded_bytes())
            .expect("a path without NUL")
    }

    pub(crate) fn path(&self) -> String {
        format!("{STATE_DIR}/{}", self.name)
    }

    /// Removes the copy, which failed a load (unless another profile has
    /// replaced it meanwhile), and marks this build's copies refused for
    /// the rest of the boot: a copy that fails once would fail again, and
    /// every load would be two.
    pub(crate) fn remove(self) {
        use std::os::unix::fs::MetadataExt;
        let path = self.path();
        let same = match (
            self.checked.file.metadata(),
            std::fs::symlink_metadata(&path),
        ) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if same {
            let _ = std::fs::remove_file(&path);
        }
        if let Ok(dir) = crate::fsafe::private_dir(Path::new(STATE_DIR)) {
            let _ = crate::fsafe::private_file(&dir, &refused(&self.name));
        }
    }
}

/// The marker of a copy that failed a load this boot.
fn refused(name: &str) -> String {
    format!("{name}.refused")
}

/// Whether this build's copies were refused this boot. By path, not
/// following a symlink: private_dir checked the directory is root's own
/// 0700 one.
fn is_refused(name: &str) -> bool {
    std::fs::symlink_metadata(Path::new(STATE_DIR).join(refused(name))).is_ok()
}

/// `core-<hash of the object and the boot>.btf`; `None` without a boot id.
fn file_name() -> Option<String> {
    let boot = crate::fsafe::boot_id()?;
    let key = fnv1a(format!("{FORMAT} {OBJECT_HASH} {boot}").as_bytes());
    Some(format!("core-{key:016x}.btf"))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Copies into root's state directory the kernel types that `obj`'s BTF
/// names, for the next profiles of this boot. Returns the path and the
/// number of types.
pub(crate) fn keep(obj: &libbpf_rs::Object) -> Result<(String, usize)> {
    use libbpf_rs::AsRawLibbpf;
    let dir = crate::fsafe::private_dir(Path::new(STATE_DIR))?;
    let name = file_name().context("no boot id")?;
    if is_refused(&name) {
        bail!("a copy failed a load earlier this boot");
    }
    // SAFETY: a loaded object's pointer; its BTF lives as long as it does.
    let local = unsafe { sys::bpf_object__btf(obj.as_libbpf_object().as_ptr()) };
    if local.is_null() {
        bail!("the object has no BTF");
    }
    let kernel = Btf::vmlinux()?;
    let mut out = Btf::empty()?;
    // SAFETY: `local` is valid while `obj` is borrowed.
    let n = unsafe { copy_named(local, kernel.0, out.0) }?;
    crate::fsafe::replace_private_file(&dir, Path::new(STATE_DIR), &name, out.raw()?)
        .context("writing the copy")?;
    // Each build of bprof keeps its own copy: the newest four stay (another
    // version's removed here only makes its next start rebuild it).
    crate::fsafe::keep_newest(Path::new(STATE_DIR), "core-", ".btf", 4);
    Ok((format!("{STATE_DIR}/{name}"), n))
}

/// An owned libbpf BTF object.
struct Btf(*mut sys::btf);

impl Btf {
    fn vmlinux() -> Result<Btf> {
        // SAFETY: no preconditions; a null or error pointer is checked.
        let p = unsafe { sys::btf__load_vmlinux_btf() };
        Btf::checked(p).context("reading the kernel's BTF")
    }

    fn empty() -> Result<Btf> {
        // SAFETY: as above.
        Btf::checked(unsafe { sys::btf__new_empty() })
    }

    fn checked(p: *mut sys::btf) -> Result<Btf> {
        // libbpf returns NULL (errno set) on error in its 1.0 mode.
        if p.is_null() {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Btf(p))
    }

    fn raw(&mut self) -> Result<&[u8]> {
        let mut size = 0u32;
        // SAFETY: a valid BTF; the data lives as long as it does (borrowed).
        let p = unsafe { sys::btf__raw_data(self.0, &mut size) };
        if p.is_null() {
            bail!("encoding the copy failed");
        }
        // SAFETY: libbpf returned `size` bytes at `p`, owned by the BTF.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size as usize) })
    }
}

impl Drop for Btf {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::btf__free(self.0) };
    }
}

// BTF kinds (uapi/linux/btf.h).
const INT: u32 = 1;
const PTR: u32 = 2;
const ARRAY: u32 = 3;
const STRUCT: u32 = 4;
const UNION: u32 = 5;
const ENUM: u32 = 6;
const FWD: u32 = 7;
const TYPEDEF: u32 = 8;
const VOLATILE: u32 = 9;
const CONST: u32 = 10;
const RESTRICT: u32 = 11;
const FLOAT: u32 = 16;
const TYPE_TAG: u32 = 18;
const ENUM64: u32 = 19;

/// The kinds CO-RE takes as a relocation's root, named.
fn is_root_kind(kind: u32) -> bool {
    matches!(kind, STRUCT | UNION | ENUM | ENUM64 | TYPEDEF)
}

/// One type of a BTF, read through libbpf's accessors.
struct Type<'a> {
    btf: *const sys::btf,
    t: &'a sys::btf_type,
}

impl<'a> Type<'a> {
    /// SAFETY: `btf` valid for 'a and `id` below its type count.
    unsafe fn of(btf: *const sys::btf, id: u32) -> Option<Type<'a>> {
        // SAFETY: per this function's contract.
        let t = unsafe { sys::btf__type_by_id(btf, id).as_ref()? };
        Some(Type { btf, t })
    }
    fn kind(&self) -> u32 {
        (self.t.info >> 24) & 0x1f
    }
    fn vlen(&self) -> usize {
        (self.t.info & 0xffff) as usize
    }
    fn kflag(&self) -> bool {
        self.t.info >> 31 != 0
    }
    /// `size` or `type`: which one, the kind says.
    fn size_or_type(&self) -> u32 {
        // SAFETY: both union members are u32.
        unsafe { self.t.__bindgen_anon_1.size }
    }
    fn name(&self) -> Option<&'a CStr> {
        name_at(self.btf, self.t.name_off)
    }
    /// The `n` records of `R` that follow the type in BTF's encoding.
    fn records<R>(&self, n: usize) -> &'a [R] {
        // SAFETY: BTF lays a kind's records out right after its btf_type,
        // and libbpf validated the whole encoding when it parsed it.
        unsafe {
            std::slice::from_raw_parts((self.t as *const sys::btf_type).add(1).cast::<R>(), n)
        }
    }
}

fn name_at<'a>(btf: *const sys::btf, off: u32) -> Option<&'a CStr> {
    if off == 0 {
        return None;
    }
    // SAFETY: a valid BTF; libbpf checks the offset against its strings.
    let p = unsafe { sys::btf__name_by_offset(btf, off) };
    // SAFETY: a NUL-terminated string inside the BTF's string section.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// The name CO-RE matches on, libbpf's rule (bpf_core_essential_name_len):
/// cut before the last `___` that has a non-underscore either side, so a
/// local `foo___flavor` relocates against `foo`. Applied to both sides.
fn essential(name: &[u8]) -> &[u8] {
    let sep = |w: &[u8]| w[0] != b'_' && &w[1..4] == b"___" && w[4] != b'_';
    match name.windows(5).rposition(sep) {
        Some(i) => &name[..=i],
        None => name,
    }
}

/// Copies every type of `kernel` whose kind can be a relocation root and
/// whose name a root-kind type of `local` has, with what it embeds, into
/// `out`. Returns the number of types written.
///
/// SAFETY: the three are valid BTF objects.
unsafe fn copy_named(
    local: *const sys::btf,
    kernel: *const sys::btf,
    out: *mut sys::btf,
) -> Result<usize> {
    let mut names: HashSet<Vec<u8>> = HashSet::new();
    // SAFETY: valid BTFs, ids below their counts.
    let (nl, nk) = unsafe { (sys::btf__type_cnt(local), sys::btf__type_cnt(kernel)) };
    for id in 1..nl {
        // SAFETY: as above.
        let Some(t) = (unsafe { Type::of(local, id) }) else {
            continue;
        };
        if let (true, Some(name)) = (is_root_kind(t.kind()), t.name()) {
            names.insert(essential(name.to_bytes()).to_vec());
        }
    }
    let mut copier = Copier {
        kernel,
        out,
        done: HashMap::new(),
    };
    for id in 1..nk {
        // SAFETY: as above.
        let Some(t) = (unsafe { Type::of(kernel, id) }) else {
            continue;
        };
        if is_root_kind(t.kind())
            && t.name()
                .is_some_and(|n| names.contains(essential(n.to_bytes())))
        {
            copier.copy(id)?;
        }
    }
    // SAFETY: a valid BTF.
    Ok(unsafe { sys::btf__type_cnt(out) }.saturating_sub(1) as usize)
}

struct Copier {
    kernel: *const sys::btf,
    out: *mut sys::btf,
    /// Kernel type id → id in `out`.
    done: HashMap<u32, u32>,
}

/// A name for libbpf: a NUL-terminated string, or NULL for none.
fn c(name: Option<&CStr>) -> *const std::ffi::c_char {
    name.map_or(std::ptr::null(), CStr::as_ptr)
}

impl Copier {
    /// Adds one type or member to `out` with `add`, a btf__add_* call;
    /// libbpf's negative error becomes an error naming `what`.
    fn add(&mut self, what: &str, add: impl FnOnce(*mut sys::btf) -> i32) -> Result<u32> {
        let id = add(self.out);
        u32::try_from(id).map_err(|_| anyhow::anyhow!("copying {what}: error {id}"))
    }

    /// The id in `out` of kernel type `id`, copied if it is not there yet.
    fn copy(&mut self, id: u32) -> Result<u32> {
        if id == 0 {
            return Ok(0);
        }
        if let Some(&n) = self.done.get(&id) {
            return Ok(n);
        }
        // SAFETY: a valid BTF and an id taken from it.
        let t =
            unsafe { Type::of(self.kernel, id) }.context("a type id outside the kernel's BTF")?;
        let what = format!("{:?} (kind {})", t.name(), t.kind());
        let name = c(t.name());
        let size = t.size_or_type();
        // SAFETY: only the btf__add_* calls in the closures are unsafe:
        // `out` is a valid BTF being built, and names are NULL or
        // NUL-terminated strings of the kernel's BTF, which outlives the copy.
        let new = unsafe {
            match t.kind() {
                INT => {
                    let enc = (t.records::<u32>(1)[0] >> 24) & 0xf;
                    self.add(&what, |o| sys::btf__add_int(o, name, size as _, enc as _))?
                }
                // CO-RE's field checks accept any pointer for a pointer, and
                // what it points to is another relocation's root.
                PTR => self.add(&what, |o| sys::btf__add_ptr(o, 0))?,
                ARRAY => {
                    let a = t.records::<sys::btf_array>(1)[0];
                    let elem = self.copy(a.type_)?;
                    let index = self.copy(a.index_type)?;
                    self.add(&what, |o| {
                        sys::btf__add_array(o, index as _, elem as _, a.nelems)
                    })?
                }
                STRUCT | UNION => {
                    // Members' types first: a struct's fields must follow it.
                    let members = t.records::<sys::btf_member>(t.vlen());
                    let types = members
                        .iter()
                        .map(|m| self.copy(m.type_))
                        .collect::<Result<Vec<u32>>>()?;
                    let add = if t.kind() == STRUCT {
                        sys::btf__add_struct
                    } else {
                        sys::btf__add_union
                    };
                    let s = self.add(&what, |o| add(o, name, size))?;
                    for (m, ty) in members.iter().zip(types) {
                        let (bits, off) = if t.kflag() {
                            (m.offset >> 24, m.offset & 0xff_ffff)
                        } else {
                            (0, m.offset)
                        };
                        let mname = c(name_at(self.kernel, m.name_off));
                        self.add(&what, |o| sys::btf__add_field(o, mname, ty as _, off, bits))?;
                    }
                    s
                }
                ENUM => {
                    let e = self.add(&what, |o| sys::btf__add_enum(o, name, size))?;
                    for v in t.records::<sys::btf_enum>(t.vlen()) {
                        let vname = c(Some(
                            name_at(self.kernel, v.name_off).context("a nameless enum value")?,
                        ));
                        // kflag: signed; otherwise the bits are a u32's.
                        let val = if t.kflag() {
                            i64::from(v.val)
                        } else {
                            i64::from(v.val as u32)
                        };
                        self.add(&what, |o| sys::btf__add_enum_value(o, vname, val))?;
                    }
                    e
                }
                ENUM64 => {
                    let signed = t.kflag();
                    let e = self.add(&what, |o| sys::btf__add_enum64(o, name, size, signed))?;
                    for v in t.records::<sys::btf_enum64>(t.vlen()) {
                        let vname = c(Some(
                            name_at(self.kernel, v.name_off).context("a nameless enum value")?,
                        ));
                        let val = u64::from(v.val_hi32) << 32 | u64::from(v.val_lo32);
                        self.add(&what, |o| sys::btf__add_enum64_value(o, vname, val))?;
                    }
                    e
                }
                FWD => {
                    let union = i32::from(t.kflag());
                    self.add(&what, |o| sys::btf__add_fwd(o, name, union as _))?
                }
                TYPEDEF => {
                    let ty = self.copy(size)?;
                    self.add(&what, |o| sys::btf__add_typedef(o, name, ty as _))?
                }
                // CO-RE looks through qualifiers and tags.
                VOLATILE | CONST | RESTRICT | TYPE_TAG => self.copy(size)?,
                FLOAT => self.add(&what, |o| sys::btf__add_float(o, name, size as _))?,
                _ => bail!("{what}: a kind no struct embeds"),
            }
        };
        self.done.insert(id, new);
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SAFETY: a valid BTF.
    unsafe fn find(btf: *const sys::btf, name: &CStr, kind: u32) -> u32 {
        // SAFETY: per the contract; the name is NUL-terminated.
        let id = unsafe { sys::btf__find_by_name_kind(btf, name.as_ptr(), kind) };
        assert!(id > 0, "{name:?} not found");
        id as u32
    }

    /// The kind a member's type has once qualifiers are looked through.
    fn resolved_kind(btf: *const sys::btf, mut id: u32) -> u32 {
        loop {
            // SAFETY: a valid BTF and one of its ids.
            let Some(t) = (unsafe { Type::of(btf, id) }) else {
                return 0;
            };
            match t.kind() {
                VOLATILE | CONST | RESTRICT | TYPE_TAG => id = t.size_or_type(),
                kind => return kind,
            }
        }
    }

    #[test]
    fn a_copy_keeps_every_member_where_the_kernel_has_it() {
        // /sys/kernel/btf/vmlinux is readable by every user.
        let kernel = Btf::vmlinux().expect("this kernel has BTF");
        let local = Btf::empty().unwrap();
        // What an object names: a flavoured struct, a plain one, an enum.
        // SAFETY: a valid BTF being built; NUL-terminated names.
        unsafe {
            assert!(sys::btf__add_struct(local.0, c"task_struct___flavour".as_ptr(), 8) > 0);
            assert!(sys::btf__add_struct(local.0, c"mm_struct".as_ptr(), 8) > 0);
            assert!(sys::btf__add_enum(local.0, c"pid_type".as_ptr(), 4) > 0);
        }
        let mut out = Btf::empty().unwrap();
        // SAFETY: three valid BTFs.
        let n = unsafe { copy_named(local.0, kernel.0, out.0) }.unwrap();
        // SAFETY: a valid BTF.
        let all = unsafe { sys::btf__type_cnt(kernel.0) } as usize;
        assert!(n > 50 && n * 20 < all, "{n} of {all} types copied");

        for name in [c"task_struct", c"mm_struct"] {
            // SAFETY: valid BTFs.
            let (k, o) = unsafe { (find(kernel.0, name, STRUCT), find(out.0, name, STRUCT)) };
            // SAFETY: as above.
            let (k, o) = unsafe { (Type::of(kernel.0, k).unwrap(), Type::of(out.0, o).unwrap()) };
            assert_eq!(k.size_or_type(), o.size_or_type(), "{name:?}");
            let km = k.records::<sys::btf_member>(k.vlen());
            let om = o.records::<sys::btf_member>(o.vlen());
            assert_eq!(km.len(), om.len(), "{name:?}");
            for (a, b) in km.iter().zip(om) {
                let an = name_at(kernel.0, a.name_off);
                assert_eq!(an, name_at(out.0, b.name_off), "{name:?}");
                assert_eq!(a.offset, b.offset, "{name:?}.{an:?}");
                let (ka, kb) = (
                    resolved_kind(kernel.0, a.type_),
                    resolved_kind(out.0, b.type_),
                );
                assert_eq!(ka, kb, "{name:?}.{an:?}");
                if kb == PTR {
                    // SAFETY: a valid BTF and one of its ids.
                    let p = unsafe { Type::of(out.0, b.type_) }.unwrap();
                    assert_eq!(p.size_or_type(), 0, "{name:?}.{an:?} points at void");
                }
            }
        }
        // SAFETY: a valid BTF.
        unsafe { find(out.0, c"pid_type", ENUM) };
        // What is written parses back.
        let raw = out.raw().unwrap().to_vec();
        // SAFETY: a buffer of raw.len() bytes; the result is checked.
        let back =
            Btf::checked(unsafe { sys::btf__new(raw.as_ptr().cast(), raw.len() as u32) }).unwrap();
        // SAFETY: a valid BTF.
        assert_eq!(unsafe { sys::btf__type_cnt(back.0) } as usize, n + 1);
    }

    #[test]
    fn flavours_are_cut_at_the_triple_underscore() {
        assert_eq!(essential(b"mm_struct___intseq"), b"mm_struct");
        assert_eq!(essential(b"task_struct"), b"task_struct");
        assert_eq!(essential(b"a__b"), b"a__b");
        // libbpf's: the last separator, with no underscore either side.
        assert_eq!(essential(b"a___b___c"), b"a___b");
        assert_eq!(essential(b"foo____bar"), b"foo____bar");
        assert_eq!(essential(b"___x"), b"___x");
    }
}
