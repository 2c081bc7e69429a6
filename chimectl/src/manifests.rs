//! Job files as `chimectl apply` and `diff` read them: YAML or JSON, one
//! job or a list of jobs per document, a file or a directory read
//! recursively (files ending `.yaml`, `.yml` or `.json`, in name order).
//!
//! Every job is checked here, before anything is sent, with the server's
//! own validation ([`JobSpec::from_json`]); each problem names the file,
//! the job and the field, and all of them are reported at once.

use chime_common::job::IF_VERSION_FIELD;
use chime_common::{JobSpec, Limits};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The most files one apply reads, and the deepest directory it enters:
/// bounds on a path that points somewhere unexpected.
pub const MAX_FILES: usize = 10_000;
const MAX_DEPTH: usize = 32;

/// One job as a file gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Where it was read, for messages.
    pub source: Source,
    /// The spec, checked.
    pub spec: JobSpec,
    /// Whether the file sets `paused`. A file that does not leaves the job's
    /// pause to `chimectl pause` and `resume`.
    pub sets_paused: bool,
}

/// A place in the job files: a file, and the job's position in it when the
/// file holds several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub file: PathBuf,
    /// 0-based position of the job among the file's jobs, when it has more than one.
    pub index: Option<usize>,
    /// 1-based line of a file with one job per line (a crontab), which
    /// names the place better than the position.
    pub line: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.index) {
            (Some(line), _) => write!(f, "{}: line {line}", self.file.display()),
            (None, Some(i)) => write!(f, "{}[{i}]", self.file.display()),
            (None, None) => write!(f, "{}", self.file.display()),
        }
    }
}

/// A problem with the job files. `job` and `field` are set when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub source: Source,
    pub job: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(job) = &self.job {
            write!(f, ": job {job:?}")?;
        }
        match self.field.as_deref().filter(|f| !f.is_empty()) {
            Some(field) => write!(f, ": {field}: {}", self.message),
            None => write!(f, ": {}", self.message),
        }
    }
}

/// Reads the jobs of every path (files, or directories read recursively).
/// Either every job, each once, or every problem found.
pub fn read(paths: &[PathBuf]) -> Result<Vec<Manifest>, Vec<Problem>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        collect_files(path, 0, &mut files, &mut problems);
    }
    if files.len() > MAX_FILES {
        problems.push(problem(
            &paths[0],
            None,
            format!("holds more than {MAX_FILES} job files"),
        ));
    }
    let mut manifests: Vec<Manifest> = Vec::new();
    let mut seen: BTreeMap<String, Source> = BTreeMap::new();
    for file in files.iter().take(MAX_FILES) {
        match std::fs::read_to_string(file) {
            Ok(text) => {
                for manifest in parse_file(file, &text, &mut problems) {
                    match seen.get(&manifest.spec.id) {
                        Some(first) => problems.push(Problem {
                            job: Some(manifest.spec.id.clone()),
                            field: Some("id".into()),
                            message: format!("is defined twice; first in {first}"),
                            source: manifest.source,
                        }),
                        None => {
                            seen.insert(manifest.spec.id.clone(), manifest.source.clone());
                            manifests.push(manifest);
                        }
                    }
                }
            }
            Err(e) => problems.push(problem(file, None, format!("cannot be read: {e}"))),
        }
    }
    if problems.is_empty() {
        Ok(manifests)
    } else {
        Err(problems)
    }
}

fn problem(file: &Path, index: Option<usize>, message: String) -> Problem {
    Problem {
        source: Source {
            file: file.to_path_buf(),
            index,
            line: None,
        },
        job: None,
        field: None,
        message,
    }
}

/// Whether a file found in a directory is a job file.
fn is_job_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

fn collect_files(path: &Path, depth: usize, files: &mut Vec<PathBuf>, problems: &mut Vec<Problem>) {
    if depth > MAX_DEPTH {
        problems.push(problem(
            path,
            None,
            format!("is nested deeper than {MAX_DEPTH} directories"),
        ));
        return;
    }
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            problems.push(problem(path, None, format!("cannot be read: {e}")));
            return;
        }
    };
    if !meta.is_dir() {
        files.push(path.to_path_buf());
        return;
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            problems.push(problem(path, None, format!("cannot be listed: {e}")));
            return;
        }
    };
    entries.sort();
    for entry in entries {
        if files.len() > MAX_FILES {
            return;
        }
        let hidden = entry
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if entry.is_dir() {
            collect_files(&entry, depth + 1, files, problems);
        } else if is_job_file(&entry) {
            files.push(entry);
        }
    }
}

/// The documents of a file: JSON for `.json`, else YAML (each `---`
/// document).
fn documents(file: &Path, text: &str) -> Result<Vec<Value>, String> {
    if file.extension().and_then(|e| e.to_str()) == Some("json") {
        return serde_json::from_str(text)
            .map(|v| vec![v])
            .map_err(|e| format!("is not valid JSON: {e}"));
    }
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| format!("is not valid YAML: {e}"))?;
        if !value.is_null() {
            values.push(value);
        }
    }
    Ok(values)
}

/// The jobs of one file; problems are added to `problems`.
fn parse_file(file: &Path, text: &str, problems: &mut Vec<Problem>) -> Vec<Manifest> {
    let values = match documents(file, text) {
        Ok(values) => values,
        Err(message) => {
            problems.push(problem(file, None, message));
            return Vec::new();
        }
    };
    let mut jobs: Vec<Value> = Vec::new();
    for value in values {
        match value {
            Value::Array(items) => jobs.extend(items),
            other => jobs.push(other),
        }
    }
    if jobs.is_empty() {
        problems.push(problem(file, None, "holds no job".into()));
    }
    let several = jobs.len() > 1;
    let unlimited = Limits {
        // The server applies its own payload limit.
        max_payload_bytes: usize::MAX,
        ..Limits::default()
    };
    let mut manifests = Vec::new();
    for (i, value) in jobs.into_iter().enumerate() {
        let source = Source {
            file: file.to_path_buf(),
            index: several.then_some(i),
            line: None,
        };
        let job = value.get("id").and_then(Value::as_str).map(str::to_string);
        if value.get(IF_VERSION_FIELD).is_some() {
            problems.push(Problem {
                source: source.clone(),
                job: job.clone(),
                field: Some(IF_VERSION_FIELD.into()),
                message: "is set by apply from the stored job; remove it from the file".into(),
            });
            continue;
        }
        match JobSpec::from_json(&value, &unlimited) {
            Ok(spec) => manifests.push(Manifest {
                source,
                spec,
                sets_paused: value.get("paused").is_some_and(|p| !p.is_null()),
            }),
            Err(errors) => problems.extend(errors.into_iter().map(|e| Problem {
                source: source.clone(),
                job: job.clone(),
                field: Some(e.field),
                message: e.message,
            })),
        }
    }
    manifests
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> (Vec<Manifest>, Vec<Problem>) {
        let mut problems = Vec::new();
        let manifests = parse_file(Path::new(name), text, &mut problems);
        (manifests, problems)
    }

    #[test]
    fn a_yaml_list_and_documents_read_as_jobs() {
        let text = "- id: a\n  schedule: {cron: '0 * * * *'}\n  handler: shell\n  payload: {argv: [\"true\"]}\n\
                    - id: b\n  schedule: {every: 1m}\n  handler: report\n  paused: true\n\
                    ---\nid: c\nschedule: {at: '2030-01-01T00:00:00Z'}\nhandler: h\n";
        let (jobs, problems) = parse("jobs.yaml", text);
        assert!(problems.is_empty(), "{problems:?}");
        let ids: Vec<&str> = jobs.iter().map(|m| m.spec.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(jobs[1].source.to_string(), "jobs.yaml[1]");
        assert!(jobs[1].sets_paused && !jobs[0].sets_paused);
    }

    #[test]
    fn problems_name_the_file_the_job_and_the_field() {
        let text = r#"[{"id": "a", "schedule": {"cron": "0 61 * * *"}, "handler": "h"},
                       {"id": "b", "schedule": {"every": "1m"}, "handler": "h", "if_version": 3}]"#;
        let (_, problems) = parse("dir/jobs.json", text);
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{text:?}");
        assert!(
            text[0].starts_with("dir/jobs.json[0]: job \"a\": schedule.cron: "),
            "{}",
            text[0]
        );
        assert!(
            text[1].starts_with("dir/jobs.json[1]: job \"b\": if_version: "),
            "{}",
            text[1]
        );
        let (_, problems) = parse("bad.yaml", "id: [unclosed");
        assert!(
            problems[0]
                .to_string()
                .starts_with("bad.yaml: is not valid YAML"),
            "{problems:?}"
        );
        let (_, problems) = parse("empty.yaml", "");
        assert_eq!(problems[0].message, "holds no job");
    }

    #[test]
    fn a_job_defined_twice_is_refused_naming_both_places() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let job = "id: same\nschedule: {every: 1m}\nhandler: h\n";
        std::fs::write(dir.path().join("a.yaml"), job).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.yml"), job).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a job").unwrap();
        let problems = read(&[dir.path().to_path_buf()]).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let text = problems[0].to_string();
        assert!(
            text.contains("sub/b.yml: job \"same\": id: is defined twice; first in"),
            "{text}"
        );
        assert!(text.contains("a.yaml"), "{text}");
    }
}
