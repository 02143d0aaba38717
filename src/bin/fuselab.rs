//! The `fuselab` command line (native only).

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    // `fuselab inspect m.onnx | head` closes stdout early: println! then panics. Treat a closed
    // pipe as the reader being done, not as a crash.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    std::process::exit(fuselab::cli::main());
}

#[cfg(target_arch = "wasm32")]
fn main() {}
