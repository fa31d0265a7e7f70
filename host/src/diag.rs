//! Diagnostics shared by every front door (the command line, the conformance
//! harness, tests): an error and its whole chain of causes as one line.
//!
//! Every layer wraps the layer below as a `source`; reading the chain here,
//! once, is what lets each layer's message say only what it adds.

/// `outer: cause: root cause`: the error and each cause in its chain once (a
/// cause whose text the message already contains is not repeated).
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
