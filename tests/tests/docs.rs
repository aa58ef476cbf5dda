//! The docs hold together: the book in `docs/` builds with mdBook (`tools/docs/build.sh`), every
//! relative link in `README.md` and `docs/**/*.md` leads to a file that exists and, with a
//! `#anchor`, to a heading of that file, and the README stays a door (at most 150 lines) rather
//! than a manual. External links are not fetched.
//!
//! The first run on a machine installs mdBook from crates.io (about 3 minutes on 2 cores, cached
//! in `~/.cache/reconciler-host/tools/`); later runs build the book in under a second.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use reconciler_host_tests::repo_root;

const README_MAX_LINES: usize = 150;

#[test]
fn the_book_builds_with_mdbook() {
    let repo = repo_root();
    let output = Command::new(repo.join("tools/docs/build.sh"))
        .current_dir(&repo)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tools/docs/build.sh: {e}"));
    assert!(
        output.status.success(),
        "tools/docs/build.sh failed (the book in docs/, its table of contents docs/SUMMARY.md):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = std::fs::read_to_string(repo.join("docs/SUMMARY.md"))
        .unwrap_or_else(|e| panic!("cannot read docs/SUMMARY.md: {e}"));
    let pages = links_in(&summary);
    assert!(pages.len() >= 10, "docs/SUMMARY.md lists only {pages:?}");
    for page in pages {
        let html = repo
            .join("target/book")
            .join(Path::new(&page).with_extension("html"));
        assert!(
            html.is_file(),
            "docs/SUMMARY.md lists {page}, but the book has no {}",
            html.display()
        );
    }
}

#[test]
fn every_relative_link_in_the_readme_and_the_docs_resolves() {
    let repo = repo_root();
    let mut files = vec![repo.join("README.md")];
    markdown_files(&repo.join("docs"), &mut files);
    assert!(files.len() > 20, "found only {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|file| broken_links(file)).collect();
    assert!(
        broken.is_empty(),
        "{} broken links (a missing file, or an anchor that matches no heading of its file):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_readme_is_a_door_of_at_most_150_lines() {
    let readme = std::fs::read_to_string(repo_root().join("README.md"))
        .unwrap_or_else(|e| panic!("cannot read README.md: {e}"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail into a page \
         of the book (docs/) and link to it"
    );
}

/// The team Role `docs/reconcilers.md` gives is the one the tenancy tests act as
/// (`reconciler_host_tests::accounts::team`, from `examples/team-role.yaml`), quoted whole.
#[test]
fn the_team_role_the_docs_give_is_the_one_the_tenancy_tests_act_as() {
    let repo = repo_root();
    let file = repo.join(reconciler_host_tests::accounts::TEAM_ROLE);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let role = text
        .find("apiVersion:")
        .map(|at| &text[at..])
        .unwrap_or_else(|| panic!("{} holds no object", file.display()));
    let docs = std::fs::read_to_string(repo.join("docs/reconcilers.md"))
        .unwrap_or_else(|e| panic!("cannot read docs/reconcilers.md: {e}"));
    assert!(
        docs.contains(&format!("```yaml\n{role}```\n")),
        "docs/reconcilers.md does not quote {} as it is (from `apiVersion:` on):\n{role}",
        file.display()
    );
}

/// A check that cannot fail is no check: a missing file, a missing anchor and a link inside
/// code are told apart.
#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_anchor() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let page = dir.path().join("page.md");
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n\n## At 50,000 objects, with `controller-runtime` (2026-11-26)\n\n\
         ```yaml\n# not a heading\n```\n",
    )
    .expect("write other.md");
    std::fs::write(
        &page,
        "# Page\n\n[ok](other.md) [ok](other.md#at-50000-objects-with-controller-runtime-2026-11-26) \
         [ok](#page) [ok](https://example.com/x.md)\n\
         [gone](missing.md) [no such heading](other.md#not-a-heading)\n\
         `[in code](missing-too.md)`\n\n```md\n[in a fence](missing-three.md)\n```\n",
    )
    .expect("write page.md");
    let broken = broken_links(&page);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("missing.md"), "{broken:#?}");
    assert!(broken[1].contains("#not-a-heading"), "{broken:#?}");
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            out.push(path);
        }
    }
}

/// Each relative link of `file` whose target is missing, or whose anchor names no heading of
/// its target, as `file: target (why)`.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut broken = Vec::new();
    for link in links_in(&text) {
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match link.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (link.as_str(), None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !target.exists() {
            broken.push(format!("{}: {link} (no such file)", file.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if target.extension().is_none_or(|ext| ext != "md") {
            continue; // an anchor into source code is a line, not a heading
        }
        let target_text = std::fs::read_to_string(&target).unwrap_or_default();
        if !heading_anchors(&target_text).contains(anchor) {
            broken.push(format!(
                "{}: {link} (no heading of {} has that anchor)",
                file.display(),
                target.display()
            ));
        }
    }
    broken
}

// No Markdown parser is among this crate's dependencies, and links and ATX headings outside
// code are all the check needs: fenced blocks and code spans are blanked out first, then
// `](target)` is read after each link text.

/// The lines of `text`, those of fenced code blocks (fences included) left empty.
fn lines_outside_fences(text: &str) -> Vec<&str> {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for line in text.lines() {
        let marker: String = line
            .trim_start()
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence = marker.len() >= 3
            && (marker.chars().all(|c| c == '`') || marker.chars().all(|c| c == '~'));
        match &fence {
            // A fence closes with the same character, at least as many times.
            Some(open) if is_fence && marker.starts_with(open.as_str()) => fence = None,
            Some(_) => {}
            None if is_fence => fence = Some(marker),
            None => {
                lines.push(line);
                continue;
            }
        }
        lines.push("");
    }
    lines
}

/// The text outside fenced code blocks, with code spans replaced by spaces.
fn prose(text: &str) -> String {
    blank_code_spans(&lines_outside_fences(text).join("\n"))
}

/// Code spans (a run of backticks up to the next run of the same length, across lines too)
/// become spaces.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        let close = (i + run..chars.len()).find(|&j| {
            chars[j - 1] != '`' && chars[j..].iter().take_while(|&&c| c == '`').count() == run
        });
        match close {
            Some(j) => {
                for &c in &chars[i..j + run] {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The targets of inline links and images (`[text](target "title")`) outside code.
fn links_in(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut links = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let inside = rest[..end].trim();
        let target = inside
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .trim_start_matches('<')
            .trim_end_matches('>');
        if !target.is_empty() {
            links.push(target.to_owned());
        }
        rest = &rest[end..];
    }
    links
}

/// The anchors GitHub and mdBook give a file's ATX headings (outside code): the heading's text
/// without its markup, lowercased, each space a `-`, every character but letters, digits, `-`
/// and `_` dropped; a repeated heading gets `-1`, `-2`, …
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for line in lines_outside_fences(text) {
        let level = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
            continue;
        }
        let slug = slug(line[level..].trim().trim_end_matches('#').trim());
        let mut unique = slug.clone();
        let mut n = 0;
        while anchors.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        anchors.insert(unique);
    }
    anchors
}

fn slug(heading: &str) -> String {
    // A link in a heading reads as its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            c if c.is_whitespace() => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
