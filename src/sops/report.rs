//! The report of a data key no key could unwrap, laid out as the `sops` CLI (and so Flux)
//! prints it: each key group, each key of it with why it failed, then why recovery failed,
//! wrapped at the widths sops wraps at. Users search for these lines; ours match them.

/// A key of a group that did not unwrap the data key, and why.
pub(crate) struct KeyFailure {
    /// As sops names the key: an age recipient, an OpenPGP fingerprint.
    pub(crate) name: String,
    pub(crate) reason: String,
}

/// Where sops wraps a key's reason and the closing paragraph.
const REASON_WIDTH: usize = 60;
const TRAILER_WIDTH: usize = 75;

/// The report for the key groups of a document (each the failures of its keys, in the order
/// tried) whose Shamir threshold is `threshold` (0: none).
pub(crate) fn report(groups: &[Vec<KeyFailure>], threshold: usize) -> String {
    let groups: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(i, keys)| {
            let keys: Vec<String> = keys.iter().map(key_report).collect();
            format!("Group {i}: FAILED\n{}", indent(&keys.join("\n\n"), "  "))
        })
        .collect();
    let trailer = if threshold == 0 {
        "Recovery failed because no master key was able to decrypt the file. In order for SOPS \
         to recover the file, at least one key has to be successful, but none were."
            .to_string()
    } else {
        format!(
            "Recovery failed because the file was encrypted with a Shamir threshold of \
             {threshold}, but only 0 part(s) were successfully recovered, one for each \
             successful key group. In order for SOPS to recover the file, at least {threshold} \
             groups have to be successful. In order for a group to be successful, decryption \
             has to succeed with any of the keys in that key group."
        )
    };
    format!(
        "Failed to get the data key required to decrypt the SOPS file.\n\n{}\n\n{}",
        groups.join("\n\n"),
        wrap(&trailer, TRAILER_WIDTH)
    )
}

/// `name: FAILED`, then the reason as a bulleted, barred block.
fn key_report(key: &KeyFailure) -> String {
    let barred = indent(&wrap(&key.reason, REASON_WIDTH), "  | ");
    format!(
        "{}: FAILED\n{}",
        key.name,
        indent(&format!("-{}", &barred[1..]), "  ")
    )
}

/// Every line of `text` (blank ones too) after `prefix`.
fn indent(text: &str, prefix: &str) -> String {
    text.split('\n')
        .map(|line| format!("{prefix}{line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` broken at spaces into lines of at most `width` characters; a word longer than that
/// stands on a line of its own, unbroken. Line breaks already there are kept.
fn wrap(text: &str, width: usize) -> String {
    text.split('\n')
        .map(|line| {
            let mut out = String::new();
            let mut current = 0;
            for word in line.split(' ') {
                let len = word.chars().count();
                if current > 0 {
                    if current + 1 + len > width {
                        out.push('\n');
                        current = 0;
                    } else {
                        out.push(' ');
                        current += 1;
                    }
                }
                out.push_str(word);
                current += len;
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_age_key_that_does_not_fit_reads_as_sops_prints_it() {
        let failure = KeyFailure {
            name: "age1q9q6806mzn5hjsxuqqqpr7g583qydpdykpyk4z6y8azar69te9hqw4hd85".into(),
            reason: "failed to create reader for decrypting sops data key with age: identity did \
                     not match any of the recipients: incorrect identity for recipient block"
                .into(),
        };
        // As sops 3.13 printed it in the differential suite's sops-wrong-key scenario.
        let expected = "Failed to get the data key required to decrypt the SOPS file.

Group 0: FAILED
  age1q9q6806mzn5hjsxuqqqpr7g583qydpdykpyk4z6y8azar69te9hqw4hd85: FAILED
    - | failed to create reader for decrypting sops data key with
      | age: identity did not match any of the recipients: incorrect
      | identity for recipient block

Recovery failed because no master key was able to decrypt the file. In
order for SOPS to recover the file, at least one key has to be successful,
but none were.";
        assert_eq!(report(&[vec![failure]], 0), expected);
    }

    #[test]
    fn several_keys_are_listed_in_turn_with_a_blank_line_between() {
        let key = |name: &str| KeyFailure {
            name: name.into(),
            reason: "short".into(),
        };
        let text = report(&[vec![key("age1a"), key("FPR")]], 0);
        assert!(
            text.contains(
                "Group 0: FAILED\n  age1a: FAILED\n    - | short\n  \n  FPR: FAILED\n    - | short\n\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn wrapping_keeps_long_words_whole_and_existing_breaks() {
        assert_eq!(wrap("aaa bbb ccc", 7), "aaa bbb\nccc");
        assert_eq!(wrap("aaa bbbbbbbbbb c", 5), "aaa\nbbbbbbbbbb\nc");
        assert_eq!(wrap("a b\nc d", 3), "a b\nc d");
        assert_eq!(wrap("abcdefgh", 3), "abcdefgh");
    }
}
