//! Compiles every `bpf/*.bpf.c` into a BPF object and generates its Rust
//! skeleton (`$OUT_DIR/<name>.skel.rs`) with libbpf-cargo.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => panic!("bprof: no BPF target mapping for architecture {other}"),
        Err(_) => panic!("CARGO_CFG_TARGET_ARCH is set by cargo"),
    };
    println!("cargo:rerun-if-changed=bpf");
    for entry in fs::read_dir("bpf").expect("bpf/ directory exists") {
        let path = entry.expect("readable bpf/ entry").path();
        let name = path.file_name().and_then(OsStr::to_str).unwrap_or_default();
        let Some(stem) = name.strip_suffix(".bpf.c") else {
            continue;
        };
        let skel = out.join(format!("{stem}.skel.rs"));
        SkeletonBuilder::new()
            .source(&path)
            .clang_args([
                OsStr::new("-I"),
                OsStr::new("bpf"),
                OsStr::new(&format!("-D__TARGET_ARCH_{arch}")),
                OsStr::new("-mcpu=v3"),
                OsStr::new("-Wall"),
                OsStr::new("-Werror"),
            ])
            .build_and_generate(&skel)
            .unwrap_or_else(|e| panic!("building {}: {e:#}", path.display()));
        if stem == "profile" {
            // Names the per-boot copy of the kernel types this object
            // relocates against (src/bpf/core_btf.rs): FNV-1a of the skeleton,
            // which embeds the whole object.
            let bytes = fs::read(&skel).expect("the skeleton just written");
            let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            println!("cargo:rustc-env=BPROF_PROFILE_OBJECT_HASH={hash:016x}");
        }
    }
}
