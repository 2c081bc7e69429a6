//! The parts of one crontab line as cron reads them: an environment
//! assignment, or a schedule (five fields or a macro), the user column of
//! a system crontab, and the command with cron's `%` rule.

/// `NAME=value` (the value optionally quoted), as cron reads environment
/// lines; `None` for a schedule line.
pub fn assignment(text: &str) -> Option<(&str, String)> {
    let (name, value) = text.split_once('=')?;
    let name = name.trim();
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
        .unwrap_or(value);
    Some((name, unquoted.to_string()))
}

/// The schedule of a line (its five fields joined by spaces, or its macro)
/// and the rest of the line after it.
pub fn schedule(text: &str) -> Result<(String, &str), String> {
    if text.starts_with('@') {
        let (name, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        if name == "@reboot" {
            return Err(
                "@reboot cannot be imported: a Chime job runs on a schedule, not when a \
                 machine starts (run it from the machine's own init system)"
                    .into(),
            );
        }
        return Ok((name.to_string(), rest.trim()));
    }
    let (fields, rest) = split_fields(text, 5).ok_or_else(|| {
        "expected five time fields and a command, an environment line NAME=value, \
         or a macro such as @daily"
            .to_string()
    })?;
    Ok((fields.join(" "), rest))
}

/// The first `n` whitespace-separated fields and the rest of the line as
/// written (a command keeps its own spacing).
pub fn split_fields(text: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut fields = Vec::with_capacity(n);
    let mut rest = text;
    for _ in 0..n {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace)?;
        fields.push(&trimmed[..end]);
        rest = &trimmed[end..];
    }
    Some((fields, rest.trim()))
}

/// The first word of `rest` and what follows it.
pub fn first_word(rest: &str) -> (&str, &str) {
    let rest = rest.trim_start();
    match rest.find(char::is_whitespace) {
        Some(end) => (&rest[..end], rest[end..].trim()),
        None => (rest, ""),
    }
}

/// Whether `word` can be a Unix user name (as `useradd` allows them).
pub fn is_user_name(word: &str) -> bool {
    let mut chars = word.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_uppercase() || c == '_');
    let body = word.strip_suffix('$').unwrap_or(word);
    first_ok
        && word.len() <= 32
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Cron turns an unescaped `%` into a newline and feeds what follows to the
/// command's standard input, which a Chime job has not: refused; `\%` is a
/// plain `%`.
pub fn unescape_percent(command: &str) -> Result<String, String> {
    let mut out = String::with_capacity(command.len());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                out.push('%');
                chars.next();
            }
            '%' => {
                return Err(
                    "the command has an unescaped %, which cron turns into standard \
                     input; a Chime job has none: write \\% for a literal %, or move the \
                     input into a script"
                        .into(),
                )
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_lines_are_told_from_schedule_lines() {
        assert_eq!(
            assignment("CRON_TZ=Europe/Berlin"),
            Some(("CRON_TZ", "Europe/Berlin".into()))
        );
        assert_eq!(assignment("FOO = \"a b\""), Some(("FOO", "a b".into())));
        assert_eq!(assignment("*/5 * * * * A=1 run"), None);
        assert_eq!(assignment("0 5 * * * run --x=1"), None);
    }

    #[test]
    fn a_command_keeps_its_spacing_and_escaped_percent() {
        let (fields, rest) = split_fields("0  5 * * 1-5   echo  'a  b' \\% done", 5).unwrap();
        assert_eq!(fields, ["0", "5", "*", "*", "1-5"]);
        assert_eq!(rest, "echo  'a  b' \\% done");
        assert_eq!(unescape_percent(rest).unwrap(), "echo  'a  b' % done");
        assert!(unescape_percent("date +%Y").is_err());
        assert_eq!(split_fields("0 5 * *", 5), None);
        assert_eq!(
            schedule("17 *\t* * *\troot\tcd /").unwrap(),
            ("17 * * * *".to_string(), "root\tcd /")
        );
        assert_eq!(first_word("root\tcd / && x"), ("root", "cd / && x"));
        assert_eq!(
            schedule("@daily  run it").unwrap(),
            ("@daily".into(), "run it")
        );
        assert!(schedule("@reboot start").unwrap_err().contains("@reboot"));
    }

    #[test]
    fn user_names_are_what_useradd_takes() {
        for good in ["root", "www-data", "_apt", "Debian-exim", "machine$", "a.b"] {
            assert!(is_user_name(good), "{good}");
        }
        for bad in ["", "1user", "/bin/true", "a b", "cd;", &"x".repeat(33)] {
            assert!(!is_user_name(bad), "{bad}");
        }
    }
}
