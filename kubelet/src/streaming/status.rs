//! The metav1.Status an exec or attach ends with, written on the error
//! stream as the kubelet's remotecommand server writes it: client-go reads
//! `NonZeroExitCode` with its `ExitCode` cause as the command's exit code.

use serde_json::{json, Value};

/// How an exec'd command ended, as far as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// Exited with this code (128 + the signal when killed by one).
    Exited { code: i32 },
    /// Never ran, or could not be followed, for this reason.
    Failed { message: String },
}

impl ExecOutcome {
    /// The Status JSON for the v4 and v5 protocols.
    pub fn status(&self, command: &[String]) -> Value {
        match self {
            ExecOutcome::Exited { code: 0 } => json!({"metadata": {}, "status": "Success"}),
            ExecOutcome::Exited { code } => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!(
                    "command terminated with non-zero exit code: error executing command {}, exit code {code}",
                    go_list(command)
                ),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
            }),
            ExecOutcome::Failed { message } => {
                let cause = format!("error executing command in container: {message}");
                json!({
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("Internal error occurred: {cause}"),
                    "reason": "InternalError",
                    "details": {"causes": [{"message": cause}]},
                    "code": 500,
                })
            }
        }
    }

    /// What the protocols before v4 write on the error stream: the
    /// Status's message on failure, nothing on success.
    pub fn message(&self, command: &[String]) -> Option<String> {
        match self.status(command).get("message") {
            Some(Value::String(message)) => Some(message.clone()),
            _ => None,
        }
    }
}

/// A list as Go's `%v` prints a `[]string`: `[sh -c exit 3]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn success_is_a_bare_success_status() {
        let status = ExecOutcome::Exited { code: 0 }.status(&command(&["true"]));
        assert_eq!(status.to_string(), r#"{"metadata":{},"status":"Success"}"#);
        assert_eq!(ExecOutcome::Exited { code: 0 }.message(&[]), None);
    }

    #[test]
    fn non_zero_exit_carries_the_code_as_kubernetes_words_it() {
        let status = ExecOutcome::Exited { code: 3 }.status(&command(&["sh", "-c", "exit 3"]));
        let expected = r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(
            status,
            serde_json::from_str::<Value>(expected).unwrap(),
            "{status}"
        );
    }

    #[test]
    fn a_command_that_cannot_start_is_an_internal_error() {
        let outcome = ExecOutcome::Failed {
            message: "exec: \"nope\": executable file not found in $PATH".into(),
        };
        let status = outcome.status(&command(&["nope"]));
        assert_eq!(status["reason"], "InternalError");
        assert_eq!(status["code"], 500);
        assert_eq!(
            outcome.message(&[]).unwrap(),
            "Internal error occurred: error executing command in container: exec: \"nope\": executable file not found in $PATH"
        );
    }
}
