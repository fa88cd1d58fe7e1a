//! Every file the READMEs (the repository's and `bench/`'s) and `docs/*.md` point at exists in
//! a clone of the repository: relative markdown links (`[text](path)`, resolved from the page's
//! folder, staying inside the repository), and file paths quoted as code (`` `src/quant.rs` ``,
//! from the repository root).

use std::path::{Path, PathBuf};

/// The top-level folders a quoted path must start with to be checked (other code spans are
/// identifiers, commands or layouts).
const ROOTS: &[&str] = &[
    "docs/",
    "src/",
    "examples/",
    "tests/",
    "tilus-core/",
    "tilus-lang/",
    "tilus-macros/",
    "tilus-runtime/",
    ".ci/",
    "bench/",
    "../",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("bench/README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    assert!(pages.len() > 5, "{pages:?}");
    pages
}

/// The prose of a page: fenced code blocks removed (their paths are examples, e.g. a user's
/// `src/main.rs`).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Targets of `[text](target)` links on a line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// Code spans on a line that look like repository paths.
fn quoted_paths(line: &str) -> Vec<&str> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| ROOTS.iter().any(|r| s.starts_with(r)))
        .filter(|s| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        })
        .collect()
}

/// Where `target` (from a page in `dir`) leads, or why it is not acceptable.
fn resolve(dir: &Path, target: &str) -> Result<(), String> {
    let file = target.split('#').next().unwrap();
    if file.is_empty() {
        return Ok(()); // an anchor on the same page
    }
    let path = dir.join(file);
    let canonical = path
        .canonicalize()
        .map_err(|_| format!("{} does not exist", path.display()))?;
    let root = root().canonicalize().unwrap();
    if !canonical.starts_with(&root) {
        return Err(format!("{} is outside the repository", canonical.display()));
    }
    Ok(())
}

fn problems() -> Vec<String> {
    let mut problems = Vec::new();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for (line_no, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                if let Err(e) = resolve(dir, target) {
                    problems.push(format!("{name}:{line_no}: link ({target}): {e}"));
                }
            }
            for path in quoted_paths(line) {
                // Quoted paths are written from the repository root.
                if let Err(e) = resolve(&root(), path) {
                    problems.push(format!("{name}:{line_no}: `{path}`: {e}"));
                }
            }
        }
    }
    assert!(
        links > 20,
        "only {links} relative links found: is the parser broken?"
    );
    problems
}

#[test]
fn every_relative_link_and_quoted_path_exists_in_the_repository() {
    let problems = problems();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_parsers_find_what_they_should() {
    assert_eq!(
        link_targets("see [a](docs/a.md) and [b](../b.md#x), not [c]"),
        ["docs/a.md", "../b.md#x"]
    );
    assert_eq!(
        quoted_paths("`src/quant.rs`, `../shared/DESIGN.md`, `local(2)`, `tilus emit`"),
        ["src/quant.rs", "../shared/DESIGN.md"]
    );
    assert!(resolve(&root(), "../shared/DESIGN.md").is_err());
    assert!(resolve(&root(), "docs/no-such-page.md").is_err());
    assert!(resolve(&root().join("docs"), "../README.md#the-tilus-cli").is_ok());
    assert_eq!(prose("a\n```\nsrc/x.rs\n```\nb").len(), 2);
}
