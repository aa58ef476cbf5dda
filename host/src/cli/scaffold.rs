//! `reconciler-host new --lang LANG NAME [DIR]`: writes a guest that builds and works, so that an
//! author starts from something green: the reconciler's source, a build script, the contract
//! (`wit/`), the guest's grant, the Widget CRD with a sample object, and one offline case that
//! `reconciler-host test` runs.
//!
//! Every language's scaffold is the project's own greeter in that language (the sources under
//! `guests/<lang>/greeter/` that `host/tests/fixtures/greeter-*` pin, made the guest's: its
//! manifest name, its type (Python's class, Go's file) named after it, and an opening comment
//! naming the project's files instead of the repository's), so a scaffold cannot drift from
//! what the tests check; only the Rust one is a template of its own (`host/templates/rust/`),
//! since the repository has no Rust greeter. Every scaffold is written on its language's SDK,
//! copied into the project (the SDKs are not published).
//!
//! A scaffold in any language but Rust is built by the recipe the repository builds its own
//! guests with: `guests/lib.sh`, written into the project as `lib.sh`, under a `build.sh` of a
//! few lines (`host/templates/build.sh`) that names the language and the guest, so a project
//! never carries a drifted copy of a build. `docs/guests/<lang>.md` walks through each;
//! `docs/guests/quickstarts.sh` runs those walks from an empty directory.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// A language a guest can be scaffolded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
    C,
    Go,
}

impl Language {
    fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::Js => "JavaScript",
            Language::C => "C",
            Language::Go => "Go",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
            Language::C => "c",
            Language::Go => "go",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "invalid guest name {0:?}: a guest name is a DNS-1123 label (lowercase letters, digits and \
         '-', starting with a letter, at most 63 characters), e.g. `greeter`"
    )]
    InvalidName(String),
    #[error("{0} exists and is not empty: choose a new directory (or remove what is there)")]
    NotEmpty(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One file of a scaffold: its path inside the guest's directory and its text.
#[derive(Debug)]
pub(crate) struct File {
    pub(crate) path: String,
    pub(crate) text: String,
    pub(crate) executable: bool,
}

const CONTRACT: &str = include_str!("../../../wit/reconciler.wit");
/// The WASI packages the contract's `http-controller` world names: a WIT directory without
/// them does not parse, whatever world a guest targets.
const CONTRACT_DEPS: [(&str, &str); 7] = [
    (
        "wit/deps/cli.wit",
        include_str!("../../../wit/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../wit/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../wit/deps/http.wit"),
    ),
    ("wit/deps/io.wit", include_str!("../../../wit/deps/io.wit")),
    (
        "wit/deps/random.wit",
        include_str!("../../../wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../wit/deps/sockets.wit"),
    ),
];
const HOST_YAML: &str = include_str!("../../templates/common/host.yaml");
const README: &str = include_str!("../../templates/common/README.md");
const WIDGET: &str = include_str!("../../templates/common/widget.yaml");
const CRD: &str = include_str!("../../../guests/testing/widget/crd.yaml");
const CASE: &str = include_str!("../../templates/common/case.yaml");
const FIXTURE_OBJECTS: &str = include_str!("../../tests/fixtures/greeter-hello/objects.yaml");
const FIXTURE_EXPECTED: &str = include_str!("../../tests/fixtures/greeter-hello/expected.json");
/// The build of every language but Rust: `build.sh` runs the language's recipe in `lib.sh`.
const BUILD: &str = include_str!("../../templates/build.sh");
const RECIPES: &str = include_str!("../../../guests/lib.sh");
const RUST_BUILD: &str = include_str!("../../templates/rust/build.sh");

/// The first paragraph of each language's opening comment in a project: what the file is and
/// what builds it, in the project's own files.
const PYTHON_OPENING: &str = "\"\"\"A reconciler in Python on the SDK in `reconciler_guest/`, made a component by\n\
                     componentize-py (`build.sh`, with the recipe in `lib.sh`).\n\n";
const JS_OPENING: &str = "// A reconciler in JavaScript on the SDK in ./reconciler-guest/, made a component by\n\
                         // jco's QuickJS backend (build.sh, with the recipe in lib.sh).\n//\n";
const C_OPENING: &str = "// A reconciler in C on the SDK in sdk/ (reconciler.h), made a component by build.sh\n\
                     // (with the recipe in lib.sh).\n//\n";
const GO_OPENING: &str = "// Package export_reconciler_api_reconciler holds the reconciler, on the Go SDK\n\
                         // (package reconciler in reconciler/); build.sh (with the recipe in lib.sh) adds the\n\
                         // bindings generated from wit/ and builds a component with stock Go.\n//\n";

/// The files of a guest `name` in `language`.
pub(crate) fn files(language: Language, name: &str) -> Result<Vec<File>, ScaffoldError> {
    if crate::cluster::validation::dns1123_label("name", name).is_err()
        || !name.starts_with(|c: char| c.is_ascii_lowercase())
    {
        return Err(ScaffoldError::InvalidName(name.to_owned()));
    }
    let fill = |template: &str| {
        template
            .replace("{{type}}", &type_name(name, template))
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{lang}}", language.flag())
            .replace("{{language}}", language.name())
    };
    let (source, toolchain, mut files) = language_files(language, name, &fill);
    let (build, recipe) = match language {
        Language::Rust => (RUST_BUILD, ""),
        _ => (
            BUILD,
            ", `lib.sh` (its recipe, the one the reconciler-host repository builds its own guests with)",
        ),
    };
    files.push(File {
        path: "build.sh".into(),
        text: fill(build),
        executable: true,
    });
    if language != Language::Rust {
        files.push(plain("lib.sh", RECIPES));
    }
    files.extend([
        plain("wit/reconciler.wit", CONTRACT),
        plain("host.yaml", fill(HOST_YAML)),
        plain("crd.yaml", CRD),
        plain("widget.yaml", WIDGET),
        plain("fixtures/hello/case.yaml", fill(CASE)),
        plain("fixtures/hello/objects.yaml", fixture_objects()),
        plain("fixtures/hello/expected.json", FIXTURE_EXPECTED),
    ]);
    files.extend(CONTRACT_DEPS.map(|(path, text)| plain(path, text)));
    files.extend([plain(
        "README.md",
        fill(README)
            .replace("{{source}}", &source)
            .replace("{{recipe}}", recipe)
            .replace("{{toolchain}}", toolchain),
    )]);
    Ok(files)
}

/// The type a guest `name` exports, in `source` (Python's class, Rust's struct): the name in
/// upper camel case (`config-mirror`: `ConfigMirror`), or with `Reconciler` after it where
/// `source` already uses that word (`manifest`: `ManifestReconciler`, not `Manifest`).
fn type_name(name: &str, source: &str) -> String {
    let camel: String = name
        .split('-')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    let used = |word: &str| {
        source.match_indices(word).any(|(at, _)| {
            let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_';
            !source[..at].ends_with(identifier)
                && !source[at + word.len()..].starts_with(identifier)
        })
    };
    let mut type_name = camel;
    while used(&type_name) {
        type_name.push_str("Reconciler");
    }
    type_name
}

/// `source` with `opening` in place of its opening comment's first paragraph, which describes
/// the file in the repository (its paths, its sibling builds). The paragraph ends where the
/// comment's "Manifest name" paragraph starts; `opening` carries the comment's opening marks.
/// A source without that paragraph is left as it is (the scaffold's tests catch it).
fn with_opening(source: &str, opening: &str) -> String {
    let Some(manifest) = source.find("Manifest name `") else {
        return source.to_owned();
    };
    let line_start = source[..manifest].rfind('\n').map_or(0, |at| at + 1);
    format!("{opening}{}", &source[line_start..])
}

fn plain(path: impl Into<String>, text: impl Into<String>) -> File {
    File {
        path: path.into(),
        text: text.into(),
        executable: false,
    }
}

/// The language's own files but the build's, and for its README: what the source is and what
/// builds it.
fn language_files(
    language: Language,
    name: &str,
    fill: &dyn Fn(&str) -> String,
) -> (String, &'static str, Vec<File>) {
    let renamed = |source: &str, opening: &str| from_greeter(source, name, opening);
    let go_source =
        format!("`export_reconciler_api_reconciler/{name}.go` (on the Go SDK in `reconciler/`)");
    match language {
        Language::Rust => (
            "`src/lib.rs` (on the SDK in `reconciler-guest/`)".into(),
            " (cargo, target wasm32-wasip2)",
            [
                plain(
                    "Cargo.toml",
                    fill(include_str!("../../templates/rust/Cargo.toml")),
                ),
                plain(
                    "src/lib.rs",
                    fill(include_str!("../../templates/rust/src/lib.rs")),
                ),
            ]
            .into_iter()
            .chain(rust_sdk())
            .collect(),
        ),
        Language::Python => (
            "`app.py` (on the Python SDK in `reconciler_guest/`)".into(),
            " (componentize-py, installed into your cache on first use)",
            std::iter::once(plain(
                "app.py",
                renamed(
                    include_str!("../../../guests/python/greeter/app.py"),
                    PYTHON_OPENING,
                ),
            ))
            .chain(python_sdk())
            .collect(),
        ),
        Language::Js => (
            "`app.js` (on the JavaScript SDK in `reconciler-guest/`)".into(),
            " (jco, QuickJS backend, installed from the lockfile into your cache on first use)",
            js_files(name),
        ),
        Language::C => (
            "`app.c` (on the C SDK in `sdk/`)".into(),
            " (clang-19 + wasi-libc, `reconciler-host componentize`)",
            std::iter::once(plain(
                "app.c",
                renamed(include_str!("../../../guests/c/greeter/app.c"), C_OPENING),
            ))
            .chain(c_sdk())
            .collect(),
        ),
        Language::Go => (
            go_source,
            " (Go >= 1.25, `reconciler-host componentize`)",
            go_files(name).into_iter().chain(go_sdk()).collect(),
        ),
    }
}

/// A JavaScript guest's own files, its lockfile, the SDK and its testing kit.
fn js_files(name: &str) -> Vec<File> {
    [
        plain(
            "app.js",
            from_greeter(
                include_str!("../../../guests/js/greeter/app.js"),
                name,
                JS_OPENING,
            ),
        ),
        plain(
            "package.json",
            include_str!("../../../guests/js/package.json"),
        ),
        plain(
            "package-lock.json",
            include_str!("../../../guests/js/package-lock.json"),
        ),
    ]
    .into_iter()
    .chain(js_sdk())
    .chain(js_testing())
    .collect()
}

/// The greeter's `source` as guest `name`'s, with `opening` as its opening comment's first
/// paragraph. The greeter names its manifest `"greeter"` exactly once; its opening comment
/// points into the repository, where the project has files of its own.
fn from_greeter(source: &str, name: &str, opening: &str) -> String {
    let source = source
        .replace("\"greeter\"", &format!("\"{name}\""))
        .replace(
            "Manifest name `greeter`",
            &format!("Manifest name `{name}`"),
        );
    let source = with_opening(&source, opening);
    // Python's class is the guest's; the other languages export functions.
    let class = type_name(name, &source);
    source
        .replace("class Greeter(", &format!("class {class}("))
        .replace("export(Greeter)", &format!("export({class})"))
}

/// A Go guest's own files: its source, named after it, and its module.
fn go_files(name: &str) -> Vec<File> {
    vec![
        plain(
            format!("export_reconciler_api_reconciler/{name}.go"),
            from_greeter(
                include_str!(
                    "../../../guests/go/greeter/export_reconciler_api_reconciler/greeter.go"
                ),
                name,
                GO_OPENING,
            ),
        ),
        // Their comments name the repository's build; the project's is its own.
        plain(
            "go.mod",
            include_str!("../../../guests/go/greeter/go.mod")
                .replace("guests/go/build.sh", "build.sh"),
        ),
        plain("go.sum", include_str!("../../../guests/go/greeter/go.sum")),
        plain(
            "gc.go",
            include_str!("../../../guests/go/gc.go").replace("(guests/lib.sh)", "(lib.sh)"),
        ),
    ]
}

/// SDK files: each `$file` of the repository's `guests/$from`, written under `$to` in the
/// project.
macro_rules! vendored {
    ($from:literal => $to:literal: $($file:literal),+ $(,)?) => {
        vec![$(plain(concat!($to, $file), include_str!(concat!("../../../guests/", $from, $file)))),+]
    };
}

/// The Rust SDK (`guests/sdk`, `reconciler-guest`), vendored into the project as
/// `reconciler-guest/`: it is not published, and a copy keeps a project buildable on its own.
/// Its manifest loses what it inherits from the repository's workspace, and its bindings read
/// the project's `wit/`.
fn rust_sdk() -> Vec<File> {
    let manifest = include_str!("../../../guests/sdk/Cargo.toml")
        .replace("edition.workspace = true", "edition = \"2024\"")
        .replace("rust-version.workspace = true\n", "")
        .replace("license.workspace = true\n", "")
        .replace("\n[lints]\nworkspace = true\n", "");
    let sources = vendored!("sdk/src/" => "reconciler-guest/src/":
        "arena.rs",
        "cluster.rs",
        "conditions.rs",
        "error.rs",
        "event.rs",
        "http.rs",
        "lib.rs",
        "lister.rs",
        "log.rs",
        "manifest.rs",
        "object.rs",
        "queue.rs",
        "testing/mod.rs",
        "testing/selector.rs"
    );
    std::iter::once(plain("reconciler-guest/Cargo.toml", manifest))
        .chain(sources.into_iter().map(|mut file| {
            file.text = file.text.replace("path: \"../../wit\"", "path: \"../wit\"");
            file
        }))
        .collect()
}

/// The Go SDK (`guests/sdk-go`) at the paths the repository's recipe copies it to in a guest's
/// module: package `reconciler` and the file of the exports package that calls the guest it
/// registers. Without `networkbackend`: a scaffold is a `controller` guest.
fn go_sdk() -> Vec<File> {
    vendored!("sdk-go/" => "":
        "reconciler/cluster.go",
        "reconciler/conditions.go",
        "reconciler/doc.go",
        "reconciler/errors.go",
        "reconciler/event.go",
        "reconciler/exports_wasip1.go",
        "reconciler/fakehost.go",
        "reconciler/guest.go",
        "reconciler/host.go",
        "reconciler/host_wasip1.go",
        "reconciler/labelselector.go",
        "reconciler/lister.go",
        "reconciler/log.go",
        "reconciler/manifest.go",
        "reconciler/object.go",
        "reconciler/preinit_wasip1.go",
        "reconciler/queue.go",
        "export_reconciler_api_reconciler/reconciler_exports.go",
        "export_reconciler_api_watches/watches_exports.go",
        "export_reconciler_api_indexes/indexes_exports.go",
    )
}

/// The Python SDK (`guests/sdk-python/src/reconciler_guest`) beside `app.py`, on
/// componentize-py's path there; its tests stay in the repository.
fn python_sdk() -> Vec<File> {
    vendored!("sdk-python/src/reconciler_guest/" => "reconciler_guest/":
        "__init__.py",
        "_bindings.py",
        "cluster.py",
        "conditions.py",
        "errors.py",
        "event.py",
        "guest.py",
        "http.py",
        "lister.py",
        "log.py",
        "manifest.py",
        "network_backend.py",
        "objects.py",
        "queue.py",
        "testing.py",
    )
}

/// The JavaScript SDK (`guests/sdk-js/reconciler-guest`, with its TypeScript types) beside
/// `app.js`, which imports `./reconciler-guest/index.js`; its tests stay in the repository.
fn js_sdk() -> Vec<File> {
    vendored!("sdk-js/reconciler-guest/" => "reconciler-guest/":
        "index.js",
        "index.d.ts",
        "manifest.js",
        "object.js",
        "error.js",
        "conditions.js",
        "env.js",
        "log.js",
        "event.js",
        "queue.js",
        "lister.js",
        "cluster.js",
    )
}

/// The JavaScript SDK's fake host for a project's native tests (`guests/sdk-js/testing`), in
/// `testing/`: `node --import ./testing/register.js --test` (never part of a component).
fn js_testing() -> Vec<File> {
    vendored!("sdk-js/testing/" => "testing/":
        "bindings.js",
        "hooks.js",
        "host.js",
        "index.d.ts",
        "index.js",
        "register.js",
        "selector.js",
    )
}

/// The C SDK (`guests/sdk-c`) in `sdk/`, where the recipe looks for it in a project, with its
/// fake host for native tests in `sdk/testing/` (the recipe compiles only `sdk/*.c`); its tests
/// stay in the repository.
fn c_sdk() -> Vec<File> {
    vendored!("sdk-c/" => "sdk/":
        "reconciler.h",
        "rg_internal.h",
        "arena.c",
        "bindings.c",
        "conditions.c",
        "error.c",
        "format.c",
        "json.c",
        "object.c",
        "testing/reconciler_testing.h",
        "testing/rg_fake_host.c",
        "testing/rg_fake_selector.c",
        "testing/rg_fake_selector.h",
    )
}

/// The project's `greeter-hello` case, with a header of its own instead of the project's.
fn fixture_objects() -> String {
    let body: Vec<&str> = FIXTURE_OBJECTS
        .lines()
        .skip_while(|line| line.starts_with('#'))
        .collect();
    format!(
        "# The offline case's objects, loaded as a cluster's: `reconciler-host test` reconciles the key \
         of case.yaml\n# on them and compares what the guest did with expected.json.\n{}\n",
        body.join("\n")
    )
}

/// Writes the scaffold into `dir` (created; it must not exist or be empty) and returns the
/// paths written.
pub fn write(language: Language, name: &str, dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
    let files = files(language, name)?;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(ScaffoldError::NotEmpty(dir.to_owned()));
    }
    let mut written = Vec::with_capacity(files.len());
    for file in files {
        let path = dir.join(&file.path);
        let io = |source| ScaffoldError::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, &file.text).map_err(io)?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        }
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Language; 5] = [
        Language::Rust,
        Language::Python,
        Language::Js,
        Language::C,
        Language::Go,
    ];

    #[test]
    fn every_language_names_its_manifest_after_the_guest_and_grants_it() {
        for language in ALL {
            let files = files(language, "hello-world").unwrap();
            let source = files
                .iter()
                .find(|f| {
                    ["src/lib.rs", "app.py", "app.js", "app.c"].contains(&f.path.as_str())
                        || f.path.ends_with("hello-world.go")
                })
                .unwrap();
            assert!(
                source.text.contains("\"hello-world\""),
                "{language:?}: {}",
                source.path
            );
            assert!(!source.text.contains("\"greeter\""), "{language:?}");
            let host = files.iter().find(|f| f.path == "host.yaml").unwrap();
            assert!(host.text.contains("  hello-world:\n"), "{}", host.text);
            let build = files.iter().find(|f| f.path == "build.sh").unwrap();
            assert!(build.executable && build.text.contains("hello-world.wasm"));
            let placeholders = [
                "{{name}}",
                "{{crate}}",
                "{{lang}}",
                "{{language}}",
                "{{source}}",
                "{{recipe}}",
                "{{toolchain}}",
                "{{type}}",
            ];
            assert!(
                files
                    .iter()
                    .all(|f| placeholders.iter().all(|p| !f.text.contains(p))),
                "{language:?}"
            );
        }
    }

    /// A scaffold builds with the repository's own recipe, not a copy of it: `lib.sh` is
    /// `guests/lib.sh`, and `build.sh` runs the language's recipe in it for this guest.
    #[test]
    fn every_language_but_rust_builds_with_the_repositorys_recipe() {
        for language in ALL {
            let files = files(language, "hello-world").unwrap();
            let lib = files.iter().find(|f| f.path == "lib.sh");
            let build = files.iter().find(|f| f.path == "build.sh").unwrap();
            if language == Language::Rust {
                assert!(lib.is_none());
                continue;
            }
            assert_eq!(lib.unwrap().text, RECIPES, "{language:?}");
            let call = format!(
                "build_project_guest \"{}\" \"$here\" \"hello-world\"",
                language.flag()
            );
            assert!(
                build.text.contains("source \"$here/lib.sh\"") && build.text.contains(&call),
                "{language:?}: {}",
                build.text
            );
            assert!(
                RECIPES.contains(&format!("\n{}_build() {{", language.flag())),
                "guests/lib.sh has no recipe for {language:?}"
            );
        }
    }

    /// Every scaffold is written on its language's SDK, a copy of the repository's, and its
    /// source uses it.
    #[test]
    fn every_scaffold_carries_its_languages_sdk_and_uses_it() {
        let expect = [
            (
                Language::Rust,
                "reconciler-guest/src/lib.rs",
                "reconciler_guest::export!",
            ),
            (Language::Go, "reconciler/guest.go", "reconciler.Register("),
            (
                Language::Js,
                "reconciler-guest/index.js",
                "defineReconciler(",
            ),
            (Language::C, "sdk/reconciler.h", "#include \"reconciler.h\""),
            (
                Language::Python,
                "reconciler_guest/guest.py",
                "Reconciler = export(Hello)",
            ),
        ];
        for (language, sdk_file, used) in expect {
            let files = files(language, "hello").unwrap();
            assert!(
                files.iter().any(|f| f.path == sdk_file),
                "{language:?} scaffold lacks {sdk_file}"
            );
            assert!(
                files.iter().any(|f| f.text.contains(used)
                    && !f.path.starts_with("reconciler")
                    && !f.path.starts_with("sdk/")),
                "{language:?}: the guest's source does not use its SDK ({used})"
            );
        }
        let rust = files(Language::Rust, "hello").unwrap();
        let manifest = rust
            .iter()
            .find(|f| f.path == "reconciler-guest/Cargo.toml")
            .unwrap();
        assert!(!manifest.text.contains("workspace"), "{}", manifest.text);
        let lib = rust
            .iter()
            .find(|f| f.path == "reconciler-guest/src/lib.rs")
            .unwrap();
        assert!(
            lib.text.contains("path: \"../wit\""),
            "the SDK reads the project's wit/"
        );
    }

    /// A JavaScript project's SDK is every module of the repository's: `index.js` imports them
    /// all, so one left out fails the project's build (`env.js` was, at first).
    #[test]
    fn the_javascript_scaffold_carries_every_module_of_the_sdk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/sdk-js/reconciler-guest");
        let mut modules: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                format!(
                    "reconciler-guest/{}",
                    e.unwrap().file_name().to_string_lossy()
                )
            })
            .collect();
        let mut vendored: Vec<String> = js_sdk().into_iter().map(|f| f.path).collect();
        modules.sort();
        vendored.sort();
        assert_eq!(vendored, modules);
    }

    /// The SDKs (and the recipe, the contract, the lockfiles) as copied from the repository:
    /// their text is the repository's; a project's own files are the rest.
    fn vendored(path: &str) -> bool {
        [
            "reconciler-guest/",
            "reconciler_guest/",
            "reconciler/",
            "sdk/",
            "testing/",
            "wit/",
        ]
        .iter()
        .any(|dir| path.starts_with(dir))
            || [
                "lib.sh",
                "go.sum",
                "package.json",
                "package-lock.json",
                "export_reconciler_api_reconciler/reconciler_exports.go",
                "export_reconciler_api_watches/watches_exports.go",
                "export_reconciler_api_indexes/indexes_exports.go",
            ]
            .contains(&path)
    }

    /// A guest `config-mirror` is `ConfigMirror` wherever its language names a type for it,
    /// not the template's `Greeter`, and Go's source file is named after it too.
    #[test]
    fn every_language_names_its_type_and_source_after_the_guest() {
        let source = |language, name: &str, path: &str| {
            let files = files(language, name).unwrap();
            for file in files.iter().filter(|f| !vendored(&f.path)) {
                assert!(
                    !file.text.contains("Greeter") && !file.path.contains("greeter"),
                    "{language:?}: {} still says Greeter",
                    file.path
                );
            }
            let found = files.iter().find(|f| f.path == path);
            found
                .unwrap_or_else(|| panic!("{language:?}: no {path}"))
                .text
                .clone()
        };
        let python = source(Language::Python, "config-mirror", "app.py");
        assert!(
            python.contains("\nclass ConfigMirror(Guest):\n"),
            "{python}"
        );
        assert!(
            python.contains("\nReconciler = export(ConfigMirror)\n"),
            "{python}"
        );
        let rust = source(Language::Rust, "config-mirror", "src/lib.rs");
        for line in [
            "struct ConfigMirror;",
            "impl Guest for ConfigMirror {",
            "reconciler_guest::export!(ConfigMirror);",
        ] {
            assert!(rust.lines().any(|l| l == line), "{line} not in:\n{rust}");
        }
        let go = source(
            Language::Go,
            "config-mirror",
            "export_reconciler_api_reconciler/config-mirror.go",
        );
        assert!(go.contains("NewManifest(\"config-mirror\""), "{go}");
        source(Language::Js, "config-mirror", "app.js");
        source(Language::C, "config-mirror", "app.c");

        // A name the source already uses for something else is not taken over.
        let python = source(Language::Python, "manifest", "app.py");
        assert!(
            python.contains("class ManifestReconciler(Guest):"),
            "{python}"
        );
        assert!(python.contains("return Manifest(\n"), "{python}");
        let python = source(Language::Python, "reconciler", "app.py");
        assert!(
            python.contains("Reconciler = export(ReconcilerReconciler)"),
            "{python}"
        );
        let rust = source(Language::Rust, "guest", "src/lib.rs");
        assert!(rust.contains("impl Guest for GuestReconciler {"), "{rust}");
    }

    /// The words of `text` that name a file (`app.py`, `sdk/reconciler.h`) or a place in the
    /// reconciler-host repository (`guests/…`, `host/…`).
    fn named_paths(text: &str) -> Vec<String> {
        const FILES: [&str; 14] = [
            ".rs", ".py", ".js", ".ts", ".c", ".h", ".go", ".sh", ".yaml", ".json", ".wit",
            ".toml", ".md", ".mod",
        ];
        const REPOSITORY: [&str; 5] = ["guests/", "host/", "tools/", "docs/", "src/"];
        text.split(|c: char| c.is_whitespace() || "`'\"()[]{}<>,;:|=".contains(c))
            .map(|word| word.trim_end_matches(['.', '*']))
            // `$here/lib.sh`: the project's folder, as a script names it.
            .map(|word| match word.split_once('/') {
                Some((variable, rest)) if variable.starts_with('$') => rest,
                _ => word,
            })
            .filter(|word| {
                !word.contains("://")
                    && !word.contains("{{")
                    && (FILES.iter().any(|ext| word.ends_with(ext))
                        || REPOSITORY
                            .iter()
                            .any(|dir| word.starts_with(dir) && word.len() > dir.len()))
            })
            .map(str::to_owned)
            .collect()
    }

    /// A project's own files point at nothing it lacks: no `src/lib.rs` in a Python project,
    /// no `guests/python/greeter/app.py` or `guests/lib.sh` of the repository it came from. The
    /// README names the host's guide in the host's repository, saying so.
    #[test]
    fn no_scaffold_file_points_at_a_file_the_project_lacks() {
        assert_eq!(
            named_paths("see `src/lib.rs`, guests/lib.sh and ./app.js; test.reconciler.dev/v1"),
            ["src/lib.rs", "guests/lib.sh", "./app.js"]
        );
        for language in ALL {
            let files = files(language, "mirror").unwrap();
            let exists = |path: &str| {
                let path = path.trim_start_matches("./");
                files.iter().any(|f| {
                    f.path == path
                        || f.path.ends_with(&format!("/{path}"))
                        || f.path
                            .starts_with(&format!("{}/", path.trim_end_matches('/')))
                })
            };
            let guide = format!("docs/guests/{}.md", language.flag());
            for file in files.iter().filter(|f| !vendored(&f.path)) {
                for path in named_paths(&file.text) {
                    let allowed = (file.path == "README.md" && path == guide)
                        || file.text.contains(&format!("#include <{path}>")); // the C library's
                    assert!(
                        allowed || exists(&path),
                        "{language:?}: {} names {path}, which the project does not have",
                        file.path
                    );
                }
            }
        }
    }

    /// No link of a project's own files is a placeholder (`https://github.com/`, a host
    /// without a page).
    #[test]
    fn no_scaffold_link_is_a_placeholder() {
        let url = regex::Regex::new(r#"https?://[^\s)\]>"'`]*"#).unwrap();
        let bare = regex::Regex::new(r"^https?://[^/]*/?$").unwrap();
        assert!(bare.is_match("https://github.com/") && !bare.is_match("https://a.test/x"));
        for language in ALL {
            for file in files(language, "mirror").unwrap() {
                if vendored(&file.path) {
                    continue;
                }
                for found in url.find_iter(&file.text) {
                    assert!(
                        !bare.is_match(found.as_str()),
                        "{language:?}: {} links to {}",
                        file.path,
                        found.as_str()
                    );
                }
            }
        }
    }

    /// The scaffold's case names the guest's own build, the key its objects hold and a fixed
    /// clock, so `reconciler-host test` in the project runs it as the README says.
    #[test]
    fn the_fixture_case_names_the_guest_its_key_and_a_clock() {
        let files = files(Language::Python, "mirror").unwrap();
        let case = files
            .iter()
            .find(|f| f.path == "fixtures/hello/case.yaml")
            .expect("a case.yaml");
        let case: serde_json::Value = serde_yaml::from_str(&case.text).unwrap();
        assert_eq!(
            case,
            serde_json::json!({"guest": "mirror", "kind": "test.reconciler.dev/v1/Widget",
                "key": "demo/w1", "now": "2026-01-02T03:04:05Z"})
        );
        let objects = files
            .iter()
            .find(|f| f.path == "fixtures/hello/objects.yaml")
            .unwrap();
        assert!(
            objects.text.contains("  name: w1\n  namespace: demo\n"),
            "{}",
            objects.text
        );
        let readme = files.iter().find(|f| f.path == "README.md").unwrap();
        assert!(
            readme
                .text
                .contains("reconciler-host test --config host.yaml"),
            "{}",
            readme.text
        );
    }

    /// `docs/guests/contract.md` quotes the contract; it must not drift from it.
    #[test]
    fn the_contract_page_quotes_the_wit() {
        let page = include_str!("../../../docs/guests/contract.md");
        assert!(
            page.contains(&format!("```wit\n{CONTRACT}```")),
            "docs/guests/contract.md no longer quotes wit/reconciler.wit: copy the file into its last block"
        );
    }

    #[test]
    fn bad_names_and_used_directories_are_refused() {
        for bad in ["", "Hello", "-a", "1abc", "a_b", &"a".repeat(64)] {
            assert!(
                matches!(files(Language::Go, bad), Err(ScaffoldError::InvalidName(_))),
                "{bad:?}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "").unwrap();
        let err = write(Language::C, "greeter", dir.path()).unwrap_err();
        assert!(err.to_string().contains("is not empty"), "{err}");

        let target = dir.path().join("fresh");
        let written = write(Language::C, "greeter", &target).unwrap();
        assert!(written.contains(&target.join("wit/reconciler.wit")));
        assert!(target.join("fixtures/hello/expected.json").exists());
    }
}
