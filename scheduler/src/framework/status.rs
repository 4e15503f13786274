//! What an extension point answers: a code, the reasons, and the plugin
//! that answered, as the scheduling framework's `Status`.

use std::borrow::Cow;
use std::fmt;

/// One reason: most are fixed texts, given without a copy (a filter
/// rejects hundreds of nodes per pod, each with its Status).
pub type Reason = Cow<'static, str>;

pub type Reasons = smallvec::SmallVec<[Reason; 1]>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Success,
    /// An internal error: the pod is retried after back-off.
    Error,
    /// The pod does not fit now; preemption may help.
    Unschedulable,
    /// The pod does not fit and preemption cannot change that.
    UnschedulableAndUnresolvable,
    /// Permit: hold the pod until allowed, rejected or timed out.
    Wait,
    /// PreFilter/PreScore: this plugin has nothing to do for the pod.
    Skip,
    /// PreEnqueue: not ready to be scheduled (e.g. scheduling gates).
    Pending,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// Held in the Status itself when there is one (the usual case: no
    /// allocation for a rejected node's Status).
    pub reasons: Reasons,
    /// The plugin that answered, once the framework has run it.
    pub plugin: &'static str,
}

impl Status {
    /// Every filter's answer for every node that passes it: no reasons,
    /// so nothing to convert or allocate.
    #[inline]
    pub fn success() -> Status {
        Status::with_reasons(Code::Success, Reasons::new())
    }

    pub fn new(code: Code, reasons: Vec<String>) -> Status {
        Status::with_reasons(code, reasons.into_iter().map(Cow::Owned).collect())
    }

    fn with_reasons(code: Code, reasons: Reasons) -> Status {
        Status {
            code,
            reasons,
            plugin: "",
        }
    }

    pub fn unschedulable(reason: impl Into<Reason>) -> Status {
        Status::with_reasons(Code::Unschedulable, smallvec::smallvec![reason.into()])
    }

    pub fn unresolvable(reason: impl Into<Reason>) -> Status {
        Status::with_reasons(
            Code::UnschedulableAndUnresolvable,
            smallvec::smallvec![reason.into()],
        )
    }

    pub fn error(reason: impl Into<Reason>) -> Status {
        Status::with_reasons(Code::Error, smallvec::smallvec![reason.into()])
    }

    pub fn skip() -> Status {
        Status::new(Code::Skip, Vec::new())
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Unschedulable, resolvable or not.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    pub fn with_plugin(mut self, plugin: &'static str) -> Status {
        if self.plugin.is_empty() {
            self.plugin = plugin;
        }
        self
    }

    /// The reasons, or the code when there is none.
    pub fn message(&self) -> String {
        match self.reasons.is_empty() {
            true => format!("{:?}", self.code),
            false => self.reasons.join(", "),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.plugin {
            "" => write!(f, "{}", self.message()),
            plugin => write!(f, "{plugin}: {}", self.message()),
        }
    }
}
