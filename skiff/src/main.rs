//! `skiff`: parse the command line, start logging, run the command; any
//! error ends the process with one line on stderr and exit code 1.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use skiff::cli::Cli;

/// mimalloc: the API's request path allocates and frees many small JSON
/// values per request, and glibc's allocator spent a quarter of its CPU
/// time there (malloc_consolidate and chunk unlinking, by perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long tasks still running after a command returns may take to stop.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    // The container shim runs alone, before any thread or runtime exists.
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|a| a == skiff::kubelet::SHIM_COMMAND)
    {
        let code = skiff_kubelet::shim::main(args.collect());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are not errors; bad flags exit with 1.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    skiff::cli::init_logging(cli.command.default_log_level());
    #[cfg(feature = "failpoints")]
    if let Err(err) = set_failpoints() {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(cli.run());
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", skiff::one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// Sets the crash points `FAILPOINTS` names (docs/failpoints.md) and says
/// which, so that a log shows what a member was started to do.
#[cfg(feature = "failpoints")]
fn set_failpoints() -> Result<(), skiff_store::StoreError> {
    let configured = skiff_store::failpoints::configure_from_env()?;
    if configured.is_empty() {
        tracing::info!("built with failpoints; FAILPOINTS sets none");
    }
    for (name, actions) in configured {
        tracing::warn!(failpoint = %name, %actions, "failpoint set from FAILPOINTS");
    }
    Ok(())
}
