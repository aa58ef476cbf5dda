//! The layering of `host/src` held to the floors table of `docs/architecture.md`: a room (a
//! top-level file or folder of `host/src`) may name, through `crate::`, only itself and rooms
//! on lower floors. Test code (a `#[cfg(test)]` module or file) is exempt: tests may reach
//! anywhere for their fixtures. Read from the source text, so it needs no build of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The floors table: room (`cli`, `capabilities`, …) → floor.
fn floors(architecture: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    let table = architecture
        .split("| floor | rooms |")
        .nth(1)
        .expect("docs/architecture.md has a `| floor | rooms |` table");
    for line in table.lines().skip(2) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, floor, rooms, ..] = cells.as_slice() else {
            break;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            break;
        };
        for room in rooms.split(',') {
            let room = room.trim().trim_matches('`');
            let name = room.trim_end_matches('/').trim_end_matches(".rs");
            floors.insert(name.to_owned(), floor);
        }
    }
    floors
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Whether `file` is a test-only module: its parent declares it under `#[cfg(test)]`.
fn test_only(file: &Path) -> bool {
    let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let parent = file.parent().unwrap().join("mod.rs");
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

/// The rooms `code` names through `crate::`.
fn named_rooms(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // Not `reconciler_host_crate::` or the like: a path that starts here.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, m)| {
            code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|room| !room.is_empty())
        .collect()
}

/// Each import in `host/src` that runs sideways or up, as `file: names room (floor n)`.
fn violations(src: &Path, floors: &BTreeMap<String, u32>) -> Vec<String> {
    let mut found = Vec::new();
    for file in sources(src) {
        let relative = file.strip_prefix(src).unwrap();
        let room = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if room == "lib" || test_only(&file) {
            continue;
        }
        let Some(&floor) = floors.get(&room) else {
            found.push(format!(
                "{}: room `{room}` is not in the floors table",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for named in named_rooms(&code(&text)) {
            if named == room {
                continue;
            }
            match floors.get(&named) {
                Some(&other) if other < floor => {}
                Some(&other) => found.push(format!(
                    "{}: room `{room}` (floor {floor}) names `{named}` (floor {other})",
                    relative.display()
                )),
                None => found.push(format!(
                    "{}: names `{named}`, which is not in the floors table",
                    relative.display()
                )),
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_room_imports_only_rooms_on_lower_floors() {
    let architecture = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let floors = floors(&architecture);
    assert!(floors.len() >= 30, "the floors table: {floors:?}");
    let found = violations(&repo().join("host/src"), &floors);
    assert!(
        found.is_empty(),
        "imports against docs/architecture.md's floors:\n{}",
        found.join("\n")
    );
}

/// The scan finds what it is for: an upward and a sideways import, and one of a room the table
/// does not list; test code and comments are left alone.
#[test]
fn the_scan_finds_an_upward_import_and_ignores_tests_and_comments() {
    let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("low")).unwrap();
    std::fs::write(
        src.join("low/mod.rs"),
        "use crate::high::X; // crate::other in a comment\n#[cfg(test)]\nmod testing;\n#[cfg(test)]\nmod tests {\n    use crate::nowhere::Y;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("low/testing.rs"), "use crate::high::Z;\n").unwrap();
    std::fs::write(
        src.join("high.rs"),
        "use crate::low::A;\nuse crate::side::B;\nuse crate::nowhere::C;\n",
    )
    .unwrap();
    std::fs::write(src.join("side.rs"), "").unwrap();
    let floors: BTreeMap<String, u32> = [("low", 1), ("high", 2), ("side", 2)]
        .map(|(r, f)| (r.to_owned(), f))
        .into();
    let found = violations(&src, &floors);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            "high.rs: names `nowhere`, which is not in the floors table",
            "high.rs: room `high` (floor 2) names `side` (floor 2)",
            "low/mod.rs: room `low` (floor 1) names `high` (floor 2)",
        ]
    );
}
