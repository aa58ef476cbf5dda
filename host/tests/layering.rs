//! The layering of `host/src` held to the two floors tables of `docs/architecture.md`, read from
//! the source text (so it needs no build of its own):
//!
//! - a wing (a top-level folder of `host/src`) may name only itself and wings on lower floors;
//! - a room (a folder or file the rooms table lists, such as `sandbox/runtime/`) may name only
//!   itself and rooms on lower floors;
//! - no files import each other in a circle, inside a room or across rooms.
//!
//! Paths are read as the compiler would: `crate::`, `super::` and `self::`, whole `use` trees
//! (`use crate::{a::b, c::{d, e}}`), and a name a `mod.rs` hands on with `pub use` followed to
//! the file that defines it. Test code (a `#[cfg(test)]` module or file) is exempt: tests may
//! reach anywhere for their fixtures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `| floor | HEADING |` table: each listed path (`cli/`, `sandbox/records.rs`) → its floor.
fn floors(architecture: &str, heading: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    let table = architecture
        .split(&format!("| floor | {heading} |"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has a `| floor | {heading} |` table"));
    for line in table.lines().skip(2) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, floor, rooms, ..] = cells.as_slice() else {
            break;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            break;
        };
        for room in rooms.split(',') {
            floors.insert(room.trim().trim_matches('`').to_owned(), floor);
        }
    }
    floors
}

/// Every `.rs` file under `dir`, relative to `root`.
fn sources(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(root, &path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path.strip_prefix(root).unwrap().to_owned());
        }
    }
    files.sort();
    files
}

/// Whether `file` is a test-only module: its parent declares it under `#[cfg(test)]`.
fn test_only(src: &Path, file: &Path) -> bool {
    let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let dir = file.parent().unwrap_or(Path::new(""));
    let parent = if dir.as_os_str().is_empty() {
        src.join("lib.rs")
    } else {
        src.join(dir).join("mod.rs")
    };
    let Ok(text) = std::fs::read_to_string(parent) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.windows(2).any(|pair| {
        pair[0].trim() == "#[cfg(test)]"
            && pair[1]
                .trim()
                .trim_start_matches("pub(crate) ")
                .starts_with(&format!("mod {stem};"))
    })
}

/// The code of `text` that is not test code or comments.
fn code(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path that starts with `crate`, `super` or `self` in `code`, use trees expanded, as
/// its segments (`["super", "http", "Outbound"]`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let starts = ["crate::", "super::", "self::"].iter().any(|head| {
            chars[at..].starts_with(&head.chars().collect::<Vec<_>>())
                && (at == 0 || !(ident(chars[at - 1]) || chars[at - 1] == ':'))
        });
        if starts {
            let (mut tree, end) = use_tree(&chars, at);
            found.append(&mut tree);
            at = end.max(at + 1);
        } else {
            at += 1;
        }
    }
    found
}

/// The paths of the use tree (or plain path) that starts at `at`, and where it ends.
fn use_tree(chars: &[char], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let skip = |at: &mut usize| {
        while *at < chars.len() && chars[*at].is_whitespace() {
            *at += 1;
        }
    };
    let mut segments = Vec::new();
    loop {
        skip(&mut at);
        if chars.get(at) == Some(&'{') {
            at += 1;
            let mut all = Vec::new();
            loop {
                skip(&mut at);
                match chars.get(at) {
                    None => return (all, at),
                    Some('}') => return (all, at + 1),
                    Some(',' | '*') => at += 1,
                    Some(_) => {
                        let (inner, end) = use_tree(chars, at);
                        for path in inner {
                            let mut whole = segments.clone();
                            if path != ["self"] {
                                whole.extend(path);
                            }
                            all.push(whole);
                        }
                        if end == at {
                            at += 1;
                        } else {
                            at = end;
                        }
                    }
                }
            }
        }
        let start = at;
        while at < chars.len() && ident(chars[at]) {
            at += 1;
        }
        if at == start {
            return (
                vec![segments]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
                at,
            );
        }
        segments.push(chars[start..at].iter().collect());
        if chars[at..].starts_with(&[':', ':']) {
            at += 2;
        } else {
            return (vec![segments], at);
        }
    }
}

/// The module a file is: `sandbox/capabilities/http/mod.rs` → `sandbox::capabilities::http`.
fn module_of(file: &Path) -> Vec<String> {
    let mut module: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        module.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        module.pop();
    }
    module
}

/// The file of a module, if it has one of its own.
fn file_of(src: &Path, module: &[String]) -> Option<PathBuf> {
    if module.is_empty() {
        return Some(PathBuf::from("lib.rs"));
    }
    let path = module.join("/");
    [format!("{path}.rs"), format!("{path}/mod.rs")]
        .into_iter()
        .map(PathBuf::from)
        .find(|file| src.join(file).exists())
}

/// `path` as written in `file`, made absolute (from the crate root), or `None` if it leaves the
/// crate (a `super` above the root).
fn absolute(file: &Path, path: &[String]) -> Option<Vec<String>> {
    let mut module = module_of(file);
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            module.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        module.pop()?;
        rest = &rest[1..];
    }
    module.extend(rest.iter().cloned());
    Some(module)
}

/// The file that defines what `module` (absolute) names: the deepest module with a file, and,
/// when the next segment is a name that file hands on with `use`, the file it comes from.
fn defining_file(src: &Path, module: &[String], depth: u32) -> Option<PathBuf> {
    let (at, file) = (0..=module.len())
        .rev()
        .find_map(|n| file_of(src, &module[..n]).map(|file| (n, file)))?;
    let Some(name) = module.get(at) else {
        return Some(file);
    };
    if depth == 0 {
        return Some(file);
    }
    let text = code(&std::fs::read_to_string(src.join(&file)).ok()?);
    for statement in text.split(';') {
        let statement = statement.trim();
        let Some(tree) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
            .or_else(|| statement.strip_prefix("pub(super) use "))
        else {
            continue;
        };
        let chars: Vec<char> = tree.chars().collect();
        for path in use_tree(&chars, 0).0 {
            if path.last() != Some(name) {
                continue;
            }
            let from = match path.first().map(String::as_str) {
                Some("crate" | "super" | "self") => absolute(&file, &path)?,
                _ => module_of(&file).into_iter().chain(path).collect(),
            };
            return defining_file(src, &from, depth - 1);
        }
    }
    Some(file)
}

/// The listed room (longest listed path) a file lies in.
fn room_of<'a>(rooms: &'a BTreeMap<String, u32>, file: &Path) -> Option<&'a str> {
    let file = file.to_string_lossy();
    rooms
        .keys()
        .filter(|room| {
            if room.ends_with('/') {
                file.starts_with(room.as_str())
            } else {
                file == room.as_str()
            }
        })
        .max_by_key(|room| room.len())
        .map(String::as_str)
}

/// The wing of a file: its first folder, or the file itself at the top (`main.rs`).
fn wing_of(file: &Path) -> String {
    let first = file
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    if file.components().count() > 1 {
        format!("{first}/")
    } else {
        first.into_owned()
    }
}

/// Which file imports which, outside test code, as resolved paths.
fn imports(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut graph = BTreeMap::new();
    for file in sources(src, src) {
        if file == Path::new("lib.rs") || test_only(src, &file) {
            continue;
        }
        let text = code(&std::fs::read_to_string(src.join(&file)).unwrap());
        let targets: BTreeSet<PathBuf> = paths(&text)
            .iter()
            .filter_map(|path| absolute(&file, path))
            .filter_map(|module| defining_file(src, &module, 4))
            .filter(|target| *target != file && *target != Path::new("lib.rs"))
            .collect();
        graph.insert(file, targets);
    }
    graph
}

/// A wing's door: a `mod.rs` right under `host/src` that only declares its rooms.
fn door(src: &Path, file: &Path) -> bool {
    file.components().count() == 2
        && file.ends_with("mod.rs")
        && std::fs::read_to_string(src.join(file))
            .unwrap()
            .lines()
            .all(|line| line.is_empty() || line.starts_with("//") || line.contains("mod "))
}

/// Each import in `host/src` against the tables, and each circle of files.
fn violations(
    src: &Path,
    wings: &BTreeMap<String, u32>,
    rooms: &BTreeMap<String, u32>,
) -> Vec<String> {
    let graph = imports(src);
    let mut found = Vec::new();
    for (file, targets) in &graph {
        let name = file.display();
        let wing = wing_of(file);
        let Some(&wing_floor) = wings.get(&wing) else {
            found.push(format!("{name}: wing `{wing}` is not in the wings table"));
            continue;
        };
        let room = room_of(rooms, file);
        if room.is_none() && !door(src, file) {
            found.push(format!("{name}: in no room of the rooms table"));
        }
        for target in targets {
            let other_wing = wing_of(target);
            match wings.get(&other_wing) {
                _ if other_wing == wing => {}
                Some(&other) if other < wing_floor => {}
                Some(&other) => found.push(format!(
                    "{name}: wing `{wing}` (floor {wing_floor}) names `{other_wing}` (floor {other})"
                )),
                None => found.push(format!("{name}: names `{other_wing}`, not a wing")),
            }
            let (Some(room), Some(other_room)) = (room, room_of(rooms, target)) else {
                continue;
            };
            if room != other_room && rooms[other_room] >= rooms[room] {
                found.push(format!(
                    "{name}: room `{room}` (floor {}) names `{other_room}` (floor {})",
                    rooms[room], rooms[other_room]
                ));
            }
        }
    }
    for circle in circles(&graph) {
        let files: Vec<String> = circle.iter().map(|f| f.display().to_string()).collect();
        found.push(format!("a circle of files: {}", files.join(" → ")));
    }
    found.sort();
    found.dedup();
    found
}

/// The circles of `graph`, one per strongly connected part of more than one file.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    // Files are few (a few hundred): a reachability walk per file is plenty.
    let reach = |from: &PathBuf| {
        let mut seen = BTreeSet::new();
        let mut next: Vec<&PathBuf> = graph.get(from).into_iter().flatten().collect();
        while let Some(file) = next.pop() {
            if seen.insert(file.clone()) {
                next.extend(graph.get(file).into_iter().flatten());
            }
        }
        seen
    };
    let reaches: BTreeMap<&PathBuf, BTreeSet<PathBuf>> =
        graph.keys().map(|file| (file, reach(file))).collect();
    let mut parts: BTreeSet<Vec<PathBuf>> = BTreeSet::new();
    for (file, reached) in &reaches {
        if !reached.contains(*file) {
            continue;
        }
        let part: Vec<PathBuf> = reached
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|back| back.contains(*file)))
            .cloned()
            .collect();
        parts.insert(part);
    }
    parts.into_iter().collect()
}

#[test]
fn every_wing_and_room_imports_only_lower_floors_and_no_files_form_a_circle() {
    let architecture = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let wings = floors(&architecture, "wings");
    let rooms = floors(&architecture, "rooms");
    assert!(wings.len() >= 10, "the wings table: {wings:?}");
    assert!(rooms.len() >= 30, "the rooms table: {rooms:?}");
    let src = repo().join("host/src");
    let found = violations(&src, &wings, &rooms);
    assert!(
        found.is_empty(),
        "imports against docs/architecture.md's floors:\n{}",
        found.join("\n")
    );
    // Every listed room exists, so that the table cannot drift into names of the past.
    let missing: Vec<&String> = rooms
        .keys()
        .chain(wings.keys())
        .filter(|room| !src.join(room.trim_end_matches('/')).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "listed but not in host/src: {missing:?}"
    );
}

/// A fresh directory for a scan's own test.
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}-{}", std::process::id()))
}

/// Writes `text` to `path` under `src`, its directories made.
fn put(src: &Path, path: &str, text: &str) {
    let path = src.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The scan finds what it is for: an upward and a sideways import between rooms and between
/// wings, a use tree, a `super::` path through a re-export, a circle inside one room, and a room
/// the table does not list; test code and comments are left alone.
#[test]
fn the_scan_finds_upward_imports_and_circles_and_ignores_tests_and_comments() {
    let dir = scratch("layering");
    let src = dir.join("src");
    let write = |path: &str, text: &str| put(&src, path, text);
    write("lib.rs", "pub mod low;\npub mod high;\n");
    write(
        "low/mod.rs",
        "pub mod base;\npub mod side;\npub mod other;\n",
    );
    write(
        "low/base/mod.rs",
        "mod a;\nmod b;\npub use a::A;\n// crate::high::X in a comment\n#[cfg(test)]\nmod testing;\n#[cfg(test)]\nmod tests {\n    use crate::high::Y;\n}\n",
    );
    write("low/base/a.rs", "use super::b::B;\npub struct A;\n");
    write("low/base/b.rs", "use super::A;\npub struct B;\n");
    write("low/base/testing.rs", "use crate::high::Z;\n");
    write("low/side.rs", "use crate::{low::base::A, high::up::C};\n");
    write("low/other.rs", "");
    write("high/mod.rs", "pub mod up;\n");
    write(
        "high/up.rs",
        "use crate::low::{base, side::S};\npub struct C;\n",
    );
    let wings = [("low/", 1), ("high/", 2)]
        .map(|(w, f)| (w.to_owned(), f))
        .into();
    let rooms = [("low/base/", 1), ("low/side.rs", 2), ("high/up.rs", 2)]
        .map(|(r, f)| (r.to_owned(), f))
        .into();
    let found = violations(&src, &wings, &rooms);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            "a circle of files: high/up.rs → low/side.rs",
            "a circle of files: low/base/a.rs → low/base/b.rs",
            "high/up.rs: room `high/up.rs` (floor 2) names `low/side.rs` (floor 2)",
            "low/other.rs: in no room of the rooms table",
            "low/side.rs: room `low/side.rs` (floor 2) names `high/up.rs` (floor 2)",
            "low/side.rs: wing `low/` (floor 1) names `high/` (floor 2)",
        ]
    );
}

/// Where the library's errors are not typed: `anyhow` outside the edge (`cli/`, `manager/`,
/// `main.rs`), and a `Result` whose error is a `String` anywhere (a `type Err = String` too);
/// test code and comments left alone. One line per place, `file:line: what`.
fn untyped_errors(src: &Path) -> Vec<String> {
    let edge = |file: &Path| {
        file.starts_with("cli") || file.starts_with("manager") || file == Path::new("main.rs")
    };
    let mut found = Vec::new();
    for file in sources(src, src) {
        if test_only(src, &file) {
            continue;
        }
        let text = code(&std::fs::read_to_string(src.join(&file)).unwrap());
        // Signatures broken over lines are read as one, without spaces or trailing commas.
        let joined: String = text
            .split_whitespace()
            .collect::<String>()
            .replace(",>", ">");
        let string_error = joined.contains("Err=String;")
            || joined.contains("Error=String;")
            || joined
                .match_indices(",String>")
                .any(|(at, _)| opens_a_result(&joined[..at]));
        if string_error {
            found.push(format!("{}: a String as an error", file.display()));
        }
        if !edge(&file) && text.contains("anyhow") {
            found.push(format!(
                "{}: anyhow outside cli/ and manager/",
                file.display()
            ));
        }
    }
    found
}

/// Whether `before` ends inside the angle brackets of a `Result<` it holds (`Result<Vec<u8>`).
fn opens_a_result(before: &str) -> bool {
    let Some(open) = before.rfind("Result<") else {
        return false;
    };
    let mut depth = 1;
    for c in before[open + "Result<".len()..].chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return false;
        }
    }
    depth == 1
}

#[test]
fn errors_are_typed_at_every_seam_and_anyhow_stays_at_the_edge() {
    let found = untyped_errors(&repo().join("host/src"));
    assert!(
        found.is_empty(),
        "errors against docs/architecture.md's rule (a thiserror type per seam):\n{}",
        found.join("\n")
    );
}

/// The error scan finds a `Result<_, String>` written over lines, a `type Err = String`, and
/// `anyhow` in a room, and leaves alone `anyhow` in `cli/`, a `Result` with a `String` inside its
/// value, and test code.
#[test]
fn the_error_scan_finds_string_errors_and_anyhow_outside_the_edge() {
    let dir = scratch("errors");
    let src = dir.join("src");
    let write = |path: &str, text: &str| put(&src, path, text);
    write("lib.rs", "pub mod cli;\npub mod room;\npub mod fine;\n");
    write("cli/mod.rs", "fn f() -> anyhow::Result<()> { Ok(()) }\n");
    write(
        "room/mod.rs",
        "mod parse;\nfn f() -> Result<\n    Vec<u8>,\n    String,\n> { todo!() }\n",
    );
    write(
        "room/parse.rs",
        "impl std::str::FromStr for X { type Err = String; }\nfn g() -> anyhow::Result<()> { Ok(()) }\n",
    );
    write(
        "fine.rs",
        "fn f() -> Result<(String, u8), E> { todo!() }\nstruct M(BTreeMap<u8, String>);\n#[cfg(test)]\nmod tests {\n    fn t() -> Result<(), String> { Ok(()) }\n}\n",
    );
    let found = untyped_errors(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            "room/mod.rs: a String as an error",
            "room/parse.rs: a String as an error",
            "room/parse.rs: anyhow outside cli/ and manager/",
        ]
    );
}
