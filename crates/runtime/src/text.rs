//! Messages as Flux caps them.

/// `message` cut to at most `max` bytes, ending in `...` when cut; a character straddling the
/// cut is dropped whole.
pub(crate) fn cap(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut cut = max - 3;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &message[..cut])
}
