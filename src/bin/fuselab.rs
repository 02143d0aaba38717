//! The `fuselab` command line (native only).

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    std::process::exit(fuselab::cli::main());
}

#[cfg(target_arch = "wasm32")]
fn main() {}
