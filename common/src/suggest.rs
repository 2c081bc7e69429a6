//! "Did you mean": the known name closest to a mistyped one.
//!
//! An unknown field is refused rather than ignored (a misspelt `retry`
//! would otherwise leave the job without its retries), so the refusal
//! should say what was meant. Closeness is Jaro-Winkler similarity
//! (`strsim`), which favours a shared beginning, as typos and other
//! tools' spellings (`retries`, `scheduel`, `timout`) keep it; names
//! shorter than four characters get no guess, since one letter of three
//! changes the word (`cmd` is not `cwd`).

/// Similarity from which a known name is offered.
const THRESHOLD: f64 = 0.85;

/// Shorter names are not guessed at.
const MIN_LEN: usize = 4;

/// The known name `word` most likely meant, if one is close enough.
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    if word.chars().count() < MIN_LEN {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(&lower, &k.to_ascii_lowercase())))
        .filter(|(k, score)| *score >= THRESHOLD && *k != word)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// The message of an unknown field `word` where the `known` ones are
/// allowed: a guess when one is close, then the list.
pub fn unknown_field(word: &str, known: &[&str]) -> String {
    match closest(word, known) {
        Some(meant) => format!(
            "unknown field; did you mean `{meant}`? (known fields are {})",
            known.join(", ")
        ),
        None => format!("unknown field; known fields are {}", known.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &[&str] = &[
        "id",
        "group",
        "schedule",
        "handler",
        "payload",
        "priority",
        "timeout",
        "retry",
        "overlap",
        "misfire",
        "misfire_threshold",
        "paused",
        "labels",
        "shards",
    ];

    #[test]
    fn typos_and_other_spellings_find_the_field_meant() {
        for (typo, meant) in [
            ("retries", "retry"),
            ("scheduel", "schedule"),
            ("timout", "timeout"),
            ("prority", "priority"),
            ("misfire_treshold", "misfire_threshold"),
            ("Handler", "handler"),
            ("shard", "shards"),
            ("lables", "labels"),
        ] {
            assert_eq!(closest(typo, JOB), Some(meant), "{typo}");
        }
    }

    #[test]
    fn names_far_from_every_field_get_no_guess() {
        for word in ["colour", "cmd", "x", "owner", "description", "notify"] {
            assert_eq!(closest(word, JOB), None, "{word}");
        }
        assert_eq!(closest("cmd", &["argv", "env", "cwd"]), None);
    }

    #[test]
    fn the_message_names_the_guess_and_the_known_fields() {
        assert_eq!(
            unknown_field("retries", &["retry", "id"]),
            "unknown field; did you mean `retry`? (known fields are retry, id)"
        );
        assert_eq!(
            unknown_field("colour", &["retry", "id"]),
            "unknown field; known fields are retry, id"
        );
    }
}
