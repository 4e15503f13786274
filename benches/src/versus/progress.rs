//! What the run is doing right now, on stderr: an indicatif spinner (or a
//! bar while counting) on a terminal, one plain line per step otherwise,
//! so that CI logs show progress too.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

const TICK: Duration = Duration::from_millis(120);
const SPINNER: &str = "{spinner} {prefix} {msg} [{elapsed}]";
const COUNTER: &str = "{spinner} {prefix} {msg} [{elapsed}] {bar:30} {pos}/{len}";

pub struct Progress {
    /// `None` when stderr is not a terminal.
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new() -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(style(SPINNER));
        bar.enable_steady_tick(TICK);
        Progress { bar: Some(bar) }
    }

    /// Which system and member count the next steps measure.
    pub fn set_prefix(&self, prefix: String) {
        match &self.bar {
            Some(bar) => bar.set_prefix(prefix),
            None => eprintln!("{prefix}"),
        }
    }

    /// A new step: a spinner with its own elapsed time.
    pub fn step(&self, message: String) {
        match &self.bar {
            Some(bar) => {
                bar.set_style(style(SPINNER));
                bar.reset();
                bar.set_message(message);
            }
            None => eprintln!("  {message}"),
        }
    }

    /// The step counts to `len`: a bar instead of the spinner.
    pub fn set_length(&self, len: u64) {
        if let Some(bar) = &self.bar {
            bar.set_style(style(COUNTER));
            bar.set_length(len);
            bar.set_position(0);
        }
    }

    pub fn inc(&self, delta: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(delta);
        }
    }

    /// A line that stays, printed above the spinner.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn style(template: &str) -> ProgressStyle {
    // The templates are constants; a bad one is a bug caught on first run.
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
}
