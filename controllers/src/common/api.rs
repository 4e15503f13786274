//! Reading the API's refusals: their HTTP code and the message a
//! controller's error shows.

/// The HTTP code of an API refusal (`None` for other failures).
pub fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The apiserver's message for an API error, else the error itself.
pub fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
