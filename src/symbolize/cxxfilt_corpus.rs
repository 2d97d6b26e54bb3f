//! C++ names as c++filt gives them: bprof's demangler (cpp_demangle, with
//! the fixes in vendor/cpp_demangle) against binutils' `c++filt -i`, whose
//! names are libiberty's without `DMGL_VERBOSE`, as perf and gdb print them.

use std::io::Write;
use std::process::{Command, Stdio};

use super::demangle;

/// Symbols whose names went wrong, with c++filt -i's names for them.
const KNOWN: &[(&str, &str)] = &[
    // A back reference in a scope took the enclosing pointer or reference.
    ("_Z1fPN1A1BEPNS0_1CE", "f(A::B*, A::B::C*)"),
    (
        "_Z6hotrefPKN2ns5OuterERNS0_5InnerEl",
        "hotref(ns::Outer const*, ns::Outer::Inner&, long)",
    ),
    (
        "_ZNK10__cxxabiv120__si_class_type_info11__do_upcastEPKNS_17__class_type_infoEPKvRNS1_15__upcast_resultE",
        "__cxxabiv1::__si_class_type_info::__do_upcast(__cxxabiv1::__class_type_info const*, void const*, __cxxabiv1::__class_type_info::__upcast_result&) const",
    ),
    // A constructor template lost its first parameter.
    (
        "_ZNSsC1IPcEET_S1_RKSaIcE",
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::basic_string<char*>(char*, char*, std::allocator<char> const&)",
    ),
    // Pack expansions, empty packs.
    ("_Z1fIJiRcEEvDpOT_", "void f<int, char&>(int&&, char&)"),
    ("_Z1fIJEEvDpOT_", "void f<>()"),
    (
        "_ZGVZN2v88internal28CFunctionBuilderWithFunctionINS_16CTypeInfoBuilderIdJEEEJNS2_INS_5LocalINS_5ValueEEEJEEEEE5BuildEvE8instance",
        "guard variable for v8::internal::CFunctionBuilderWithFunction<v8::CTypeInfoBuilder<double>, v8::CTypeInfoBuilder<v8::Local<v8::Value>> >::Build()::instance",
    ),
    // Thunks and vtables.
    (
        "_ZThn8_N5clang9ASTWriter17DeducedReturnTypeEPKNS_12FunctionDeclENS_8QualTypeE",
        "non-virtual thunk to clang::ASTWriter::DeducedReturnType(clang::FunctionDecl const*, clang::QualType)",
    ),
    (
        "_ZTv0_n24_N4node7TCPWrapD0Ev",
        "virtual thunk to node::TCPWrap::~TCPWrap()",
    ),
    (
        "_ZTVN4llvm24MCMachObjectTargetWriterE",
        "vtable for llvm::MCMachObjectTargetWriter",
    ),
    // Literals, abbreviations, local names, function types.
    (
        "_ZN4llvm13LiveRangeEdit16eliminateDeadDefEPNS_12MachineInstrERNS_9SetVectorIPNS_12LiveIntervalENS_11SmallVectorIS5_Lj8EEENS_11SmallPtrSetIS5_Lj8EEEEE",
        "llvm::LiveRangeEdit::eliminateDeadDef(llvm::MachineInstr*, llvm::SetVector<llvm::LiveInterval*, llvm::SmallVector<llvm::LiveInterval*, 8u>, llvm::SmallPtrSet<llvm::LiveInterval*, 8u> >&)",
    ),
    ("_ZNSi8readsomeEPcl", "std::istream::readsome(char*, long)"),
    (
        "_ZZN4node7ReallocIDsEEPT_S2_mE20error_and_abort_args",
        "node::Realloc<char16_t>(char16_t*, unsigned long)::error_and_abort_args",
    ),
    (
        "_ZNSt6vectorIN4llvm4json5ValueESaIS2_EE17_M_realloc_insertIJDnEEEvN9__gnu_cxx17__normal_iteratorIPS2_S4_EEDpOT_",
        "void std::vector<llvm::json::Value, std::allocator<llvm::json::Value> >::_M_realloc_insert<decltype(nullptr)>(__gnu_cxx::__normal_iterator<llvm::json::Value*, std::vector<llvm::json::Value, std::allocator<llvm::json::Value> > >, decltype(nullptr)&&)",
    ),
    (
        "_ZN4llvm7jitlink13JITLinkerBase9runPassesERSt6vectorISt8functionIFNS_5ErrorERNS0_9LinkGraphEEESaIS8_EE",
        "llvm::jitlink::JITLinkerBase::runPasses(std::vector<std::function<llvm::Error (llvm::jitlink::LinkGraph&)>, std::allocator<std::function<llvm::Error (llvm::jitlink::LinkGraph&)> > >&)",
    ),
    (
        "_ZSt16__introsort_loopIPilN9__gnu_cxx5__ops15_Iter_less_iterEEvT_S4_T0_T1_",
        "void std::__introsort_loop<int*, long, __gnu_cxx::__ops::_Iter_less_iter>(int*, int*, long, __gnu_cxx::__ops::_Iter_less_iter)",
    ),
];

/// `c++filt -i`'s name for each of `symbols`, in order.
fn cxxfilt(symbols: &[String]) -> Vec<String> {
    let mut child = Command::new("c++filt")
        .arg("-i")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run c++filt (binutils)");
    let mut stdin = child.stdin.take().expect("c++filt's stdin");
    let input = symbols.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("read c++filt");
    writer.join().expect("writer").expect("write to c++filt");
    assert!(out.status.success(), "c++filt failed");
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), symbols.len(), "one name per symbol");
    names
}

/// Every C++ symbol libstdc++ defines, as `nm -D --defined-only` lists it.
fn libstdcxx_symbols() -> Vec<String> {
    let lib = [
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/usr/lib64/libstdc++.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libstdc++.so.6");
    let out = Command::new("nm")
        .args(["-D", "--defined-only", lib])
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed");
    let mut syms: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .filter(|s| s.starts_with("_Z"))
        .collect();
    syms.sort();
    syms.dedup();
    syms
}

#[test]
fn known_symbols_read_as_cxxfilt_reads_them() {
    for (mangled, want) in KNOWN {
        assert_eq!(demangle(mangled), *want, "{mangled}");
    }
    // The expectations are c++filt's own, on this machine too.
    let syms: Vec<String> = KNOWN.iter().map(|(m, _)| m.to_string()).collect();
    let want: Vec<&str> = KNOWN.iter().map(|(_, w)| *w).collect();
    assert_eq!(cxxfilt(&syms), want);
}

/// Every C++ symbol of the machine's libstdc++ (thousands) demangles as
/// `c++filt -i` demangles it; a few misses are allowed for a libstdc++
/// newer than the one the fixes were measured on, each printed.
#[test]
fn libstdcxx_symbols_match_cxxfilt() {
    let syms = libstdcxx_symbols();
    assert!(syms.len() > 1000, "only {} C++ symbols", syms.len());
    let want = cxxfilt(&syms);
    let misses: Vec<String> = syms
        .iter()
        .zip(&want)
        .filter_map(|(s, w)| {
            let got = demangle(s);
            (got != *w).then(|| format!("{s}\n  c++filt: {w}\n  bprof:   {got}"))
        })
        .collect();
    let rate = 1.0 - misses.len() as f64 / syms.len() as f64;
    assert!(
        rate >= 0.995,
        "{} of {} libstdc++ symbols differ from c++filt -i:\n{}",
        misses.len(),
        syms.len(),
        misses
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
