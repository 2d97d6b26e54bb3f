//! bprof: a sampling profiler that counts stacks inside the kernel with BPF.

fn main() -> std::process::ExitCode {
    bprof::run()
}
