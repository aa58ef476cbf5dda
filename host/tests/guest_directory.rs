//! The guest directory: hot add, replace and remove, refusals that keep the last good version,
//! grant checks at load, and the file-system patterns of editors and ConfigMap volumes.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reconciler_host::config::HostConfig;
use reconciler_host::config::Mode;
use reconciler_host::sandbox::runtime::{Runtime, RuntimeOptions, content_hash};
use reconciler_host::sandbox::shadow::Shadows;
use reconciler_host::supply::guest_set::{
    Artefact, Changes, Directory, FileState, FirstPass, GuestEvent, GuestSource, Guests, Origin,
    SourceError,
};
use tokio::sync::broadcast::Receiver;

fn grants() -> String {
    std::fs::read_to_string(common::repo_root().join("guests/testing/widget/host.yaml"))
        .expect("guests/testing/widget/host.yaml")
}

fn directory(dir: &Path, grants: &str) -> Arc<Guests> {
    let runtime = Arc::new(
        Runtime::new(&RuntimeOptions {
            cache_dir: Some(common::cache_dir()),
            ..RuntimeOptions::default()
        })
        .unwrap(),
    );
    let config = Arc::new(HostConfig::parse(grants, "host.yaml".as_ref()).unwrap());
    Guests::new(
        Directory::new(dir.to_owned()),
        runtime,
        config,
        None,
        Arc::new(Shadows::new(None)),
    )
}

fn copy(guest: &str, to: &Path) {
    std::fs::copy(common::guest(guest), to).unwrap();
}

fn active_hash(directory: &Guests) -> Option<String> {
    directory.active().first().map(|g| g.loaded.hash.clone())
}

fn next_loaded(events: &mut Receiver<GuestEvent>) -> String {
    match events.try_recv() {
        Ok(GuestEvent::Loaded(guest)) => guest.loaded.hash.clone(),
        other => panic!("expected a Loaded event, got {other:?}"),
    }
}

/// A guest directory with the widget guest added and loaded: the directory, the set, its
/// events, the file and the loaded version's hash.
struct Loaded {
    dir: tempfile::TempDir,
    guests: Arc<Guests>,
    events: Receiver<GuestEvent>,
    file: std::path::PathBuf,
    v1: String,
}

fn widget_loaded() -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &grants());
    let mut events = guests.subscribe();
    let file = dir.path().join("widget.wasm");
    copy("widget", &file);
    guests.rescan();
    let v1 = next_loaded(&mut events);
    assert_eq!(active_hash(&guests).as_deref(), Some(v1.as_str()));
    Loaded {
        dir,
        guests,
        events,
        file,
        v1,
    }
}

#[test]
fn add_replace_refuse_and_remove() {
    // Add.
    let Loaded {
        dir: _dir,
        guests,
        mut events,
        file,
        v1,
    } = widget_loaded();

    // Replace with a new version: swapped, a new event.
    copy("widget-v2", &file);
    guests.rescan();
    let v2 = next_loaded(&mut events);
    assert_ne!(v1, v2);
    assert_eq!(active_hash(&guests).as_deref(), Some(v2.as_str()));

    // Replace with garbage: refused with file and reason; the last good version stays active.
    std::fs::write(&file, b"not wasm at all").unwrap();
    guests.rescan();
    assert!(
        events.try_recv().is_err(),
        "a refused file must not change the active set"
    );
    assert_eq!(active_hash(&guests).as_deref(), Some(v2.as_str()));
    let status = &guests.statuses()[0];
    let FileState::Failed(reason) = &status.state else {
        panic!("{status:?}")
    };
    assert!(
        reason.contains("widget.wasm: not a WebAssembly component"),
        "{reason}"
    );
    assert_eq!(status.active_hash.as_deref(), Some(v2.as_str()));

    // Unchanged content: nothing happens.
    guests.rescan();
    assert!(events.try_recv().is_err());

    // Remove: unloaded, its name announced.
    std::fs::remove_file(&file).unwrap();
    guests.rescan();
    match events.try_recv() {
        Ok(GuestEvent::Unloaded(name)) => assert_eq!(name, "widget"),
        other => panic!("expected Unloaded, got {other:?}"),
    }
    assert!(guests.active().is_empty());
    // What is left is the finalizer it declared, which objects may still carry.
    let statuses = guests.statuses();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0].state, FileState::Unloaded);
    let orphan = statuses[0]
        .orphaned_finalizer
        .as_ref()
        .expect("orphaned finalizer");
    assert_eq!(orphan.finalizer, "test.reconciler.dev/cleanup");
    assert_eq!(guests.orphan("widget").as_ref(), Some(orphan));

    // Back again: the orphan record goes.
    std::fs::copy(common::guest("widget"), &file).unwrap();
    guests.rescan();
    assert!(guests.orphan("widget").is_none());
    assert!(
        guests
            .statuses()
            .iter()
            .all(|s| s.state == FileState::Loaded)
    );
}

#[test]
fn a_half_written_guest_is_neither_loaded_nor_refused_and_loads_once_whole() {
    let Loaded {
        dir: _dir,
        guests,
        mut events,
        file,
        v1,
    } = widget_loaded();

    // A slow writer replacing it in place, read at every stage: empty, cut inside the header,
    // cut inside a section.
    let v2 = std::fs::read(common::guest("widget-v2")).unwrap();
    for cut in [0, 5, v2.len() / 3, v2.len() - 1] {
        std::fs::write(&file, &v2[..cut]).unwrap();
        guests.rescan();
        assert!(
            events.try_recv().is_err(),
            "a file cut at {cut} of {} bytes changed the active set",
            v2.len()
        );
        assert_eq!(active_hash(&guests).as_deref(), Some(v1.as_str()));
        let status = &guests.statuses()[0];
        assert_eq!(
            status.state,
            FileState::Loaded,
            "a file cut at {cut} bytes was judged: {status:?}"
        );
    }
    // Whole: loaded.
    std::fs::write(&file, &v2).unwrap();
    guests.rescan();
    assert_eq!(next_loaded(&mut events), content_hash(&v2));

    // Cut short and left so for longer than a write takes: judged, and refused.
    std::fs::write(&file, &v2[..v2.len() / 2]).unwrap();
    let old = std::time::SystemTime::now() - reconciler_host::supply::guest_set::WRITING * 2;
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old)
        .unwrap();
    guests.rescan();
    let FileState::Failed(reason) = &guests.statuses()[0].state else {
        panic!("{:?}", guests.statuses())
    };
    assert!(reason.contains("widget.wasm"), "{reason}");
}

#[test]
fn a_guest_without_a_grant_or_beyond_it_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    copy("widget", &dir.path().join("widget.wasm"));

    let none = directory(dir.path(), "guests: {}\n");
    none.rescan();
    assert!(none.active().is_empty());
    let FileState::Failed(reason) = &none.statuses()[0].state else {
        panic!()
    };
    assert!(
        reason.contains("guest `widget` has no grant: add guests.widget"),
        "{reason}"
    );

    // Reads its primary but not its secondary, and may not write for its finalizer.
    let partial = directory(
        dir.path(),
        "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget]\n",
    );
    partial.rescan();
    assert!(partial.active().is_empty());
    let FileState::Failed(reason) = &partial.statuses()[0].state else {
        panic!()
    };
    assert!(reason.contains("asks for more than its grant"), "{reason}");
    assert!(
        reason.contains("read v1/ConfigMap (a secondary watch; add it to guests.widget.read)"),
        "{reason}"
    );
    assert!(
        reason.contains("write test.reconciler.dev/v1/Widget (to add and remove its finalizer"),
        "{reason}"
    );

    // Writes its primary, but verbs that leave out the patch its finalizer takes.
    let no_patch = directory(
        dir.path(),
        "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n    writeVerbs: {test.reconciler.dev/v1/Widget: [delete]}\n",
    );
    no_patch.rescan();
    let FileState::Failed(reason) = &no_patch.statuses()[0].state else {
        panic!()
    };
    assert!(
        reason.contains("patch test.reconciler.dev/v1/Widget (to add and remove its finalizer; add patch to guests.widget.writeVerbs)"),
        "{reason}"
    );

    // Asks for 2 workers where the host allows 1 per guest.
    let capped = directory(
        dir.path(),
        "maxConcurrency: 1\nguests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n",
    );
    capped.rescan();
    assert!(capped.active().is_empty());
    let FileState::Failed(reason) = &capped.statuses()[0].state else {
        panic!()
    };
    assert!(
        reason.contains("concurrency 2 (the host allows at most 1 per guest: maxConcurrency)"),
        "{reason}"
    );
}

#[test]
fn the_network_guest_needs_a_configured_network_backend() {
    let dir = tempfile::tempdir().unwrap();
    copy("network", &dir.path().join("network.wasm"));
    let grants = "guests:\n  network:\n    read: [samplecrd.k8s.io/v1/Network]\n    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]\n";
    let guests = directory(dir.path(), grants);
    guests.rescan();
    let FileState::Failed(reason) = &guests.statuses()[0].state else {
        panic!()
    };
    assert!(
        reason.contains("the `network` backend (it imports network-backend"),
        "{reason}"
    );
}

/// The state and active guest name of `file` on `/guests`.
fn status_of(directory: &Guests, file: &Path) -> (FileState, Option<String>) {
    let status = directory
        .statuses()
        .into_iter()
        .find(|s| s.file == file)
        .unwrap_or_else(|| panic!("{} has a status", file.display()));
    (status.state, status.guest)
}

/// The refusal of an impostor: `file` declared `declared`, a grant of another file.
fn assert_impostor(directory: &Guests, file: &Path, declared: &str) {
    let (state, guest) = status_of(directory, file);
    let FileState::Failed(reason) = &state else {
        panic!("{} must be refused: {state:?}", file.display())
    };
    let stem = file.file_stem().unwrap().to_str().unwrap();
    for part in [
        format!("{}: declares guest `{declared}`", file.display()),
        format!("guests.{declared} is the grant of {declared}.wasm"),
        format!("rename the file to {declared}.wasm, or grant it as guests.{declared}@{stem}"),
    ] {
        assert!(reason.contains(&part), "{part:?} in {reason}");
    }
    assert_eq!(
        guest, None,
        "an impostor is never the active version of its file"
    );
}

/// The guests running now, by name, with the file each came from.
fn running(directory: &Guests) -> Vec<(String, String)> {
    let mut running: Vec<(String, String)> = directory
        .active()
        .iter()
        .map(|g| {
            let file = g.loaded.file.file_name().unwrap().to_string_lossy();
            (g.name().to_owned(), file.into_owned())
        })
        .collect();
    running.sort();
    running
}

#[test]
fn a_file_declaring_another_guests_name_is_refused_whether_it_comes_before_or_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &grants());
    let widget = config(&grants()).grant("widget").unwrap();

    // Before: alone, the impostor (a build declaring `widget`) does not get widget's grant.
    let before = dir.path().join("evil.wasm");
    copy("widget-v2", &before);
    guests.rescan();
    assert!(guests.active().is_empty(), "{:?}", guests.statuses());
    assert_impostor(&guests, &before, "widget");

    // The rightful file then loads as `widget` with its grant, never refused as a duplicate.
    let rightful = dir.path().join("widget.wasm");
    copy("widget", &rightful);
    guests.rescan();
    assert_eq!(
        running(&guests),
        [("widget".to_owned(), "widget.wasm".to_owned())]
    );
    assert_eq!(guests.active()[0].grant, widget);
    assert_eq!(
        status_of(&guests, &rightful),
        (FileState::Loaded, Some("widget".into()))
    );
    assert_impostor(&guests, &before, "widget");

    // After: an impostor that sorts (and so loads) first does not displace it either.
    let mut events = guests.subscribe();
    let after = dir.path().join("a.wasm");
    copy("widget-v2", &after);
    guests.rescan();
    assert!(events.try_recv().is_err(), "an impostor changes nothing");
    assert_impostor(&guests, &after, "widget");
    let active = guests.active();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].loaded.file, rightful);
    assert_eq!(
        active[0].loaded.hash,
        content_hash(&std::fs::read(common::guest("widget")).unwrap())
    );

    // Both in one scan, the impostor first: the same.
    let fresh = tempfile::tempdir().unwrap();
    copy("widget-v2", &fresh.path().join("a.wasm"));
    copy("widget", &fresh.path().join("widget.wasm"));
    let together = directory(fresh.path(), &grants());
    together.rescan();
    assert_eq!(
        running(&together),
        [("widget".to_owned(), "widget.wasm".to_owned())]
    );
    assert_impostor(&together, &fresh.path().join("a.wasm"), "widget");
}

/// The widget grant and a network grant (with the backend it needs).
fn widget_and_network_grants() -> String {
    let network = "  network:\n    read: [samplecrd.k8s.io/v1/Network]\n    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]\n    backends: [network]\n";
    format!(
        "{}backends:\n  network: {{provider: memory}}\n",
        grants().replace("guests:\n", &format!("guests:\n{network}"))
    )
}

#[test]
fn a_granted_guest_that_swaps_itself_for_another_guests_name_keeps_its_last_good_version() {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &widget_and_network_grants());
    let own = dir.path().join("network.wasm");
    copy("network", &own);
    copy("widget", &dir.path().join("widget.wasm"));
    guests.rescan();
    let both = [
        ("network".to_owned(), "network.wasm".to_owned()),
        ("widget".to_owned(), "widget.wasm".to_owned()),
    ];
    assert_eq!(running(&guests), both);
    let kept = content_hash(&std::fs::read(&own).unwrap());

    // network.wasm now declares `widget`: refused, though both names have grants.
    let mut events = guests.subscribe();
    copy("widget-v2", &own);
    guests.rescan();
    assert!(events.try_recv().is_err(), "an impostor changes nothing");
    let status = guests
        .statuses()
        .into_iter()
        .find(|s| s.file == own)
        .unwrap();
    let FileState::Failed(reason) = &status.state else {
        panic!("{status:?}")
    };
    assert!(
        reason.contains("network.wasm: declares guest `widget`"),
        "{reason}"
    );
    assert_eq!(status.guest.as_deref(), Some("network"), "{status:?}");
    assert_eq!(status.active_hash.as_deref(), Some(kept.as_str()));
    assert_eq!(running(&guests), both);
}

#[test]
fn a_grant_for_one_file_is_that_files_alone_and_gives_it_no_other_name() {
    let dir = tempfile::tempdir().unwrap();
    let trial = widget_and_network_grants().replace(
        "guests:\n",
        "guests:\n  widget@widget-next:\n    mode: shadow\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n",
    );
    let guests = directory(dir.path(), &trial);
    copy("widget", &dir.path().join("widget.wasm"));
    let next = dir.path().join("widget-next.wasm");
    copy("widget-v2", &next);
    // Another file declaring `widget` gets neither `widget` nor the trial's grant.
    let other = dir.path().join("widget-later.wasm");
    copy("widget-v2", &other);
    guests.rescan();
    assert_eq!(
        running(&guests),
        [
            ("widget".to_owned(), "widget.wasm".to_owned()),
            (
                "widget@widget-next".to_owned(),
                "widget-next.wasm".to_owned()
            ),
        ]
    );
    assert_impostor(&guests, &other, "widget");

    // The trial's file swapped for a guest declaring `network`, which has a grant of its own:
    // refused (`network@widget-next` is not granted), and the trial version stays.
    let kept = content_hash(&std::fs::read(&next).unwrap());
    copy("network", &next);
    guests.rescan();
    let status = guests
        .statuses()
        .into_iter()
        .find(|s| s.file == next)
        .unwrap();
    let FileState::Failed(reason) = &status.state else {
        panic!("{status:?}")
    };
    assert!(
        reason.contains("widget-next.wasm: declares guest `network`")
            && reason.contains("grant it as guests.network@widget-next"),
        "{reason}"
    );
    assert_eq!(status.guest.as_deref(), Some("widget@widget-next"));
    assert_eq!(status.active_hash.as_deref(), Some(kept.as_str()));
}

#[test]
fn a_new_configuration_never_lets_an_impostor_in() {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &grants());
    let impostor = dir.path().join("evil.wasm");
    copy("widget-v2", &impostor);
    copy("widget", &dir.path().join("widget.wasm"));
    guests.rescan();
    let rightful = [("widget".to_owned(), "widget.wasm".to_owned())];
    assert_eq!(running(&guests), rightful);

    // Every file is judged again, the refused ones from their bytes: the impostor stays out,
    // whether the rightful guest's grant changes, goes or comes back.
    let shadow = grants().replace("  widget:\n", "  widget:\n    mode: shadow\n");
    for (config_text, expected) in [
        (shadow.as_str(), &rightful[..]),
        ("guests: {}\n", &[][..]),
        (grants().as_str(), &rightful[..]),
    ] {
        guests.reconfigure(config(config_text)).unwrap();
        assert_eq!(running(&guests), expected, "after {config_text}");
        assert_impostor(&guests, &impostor, "widget");
    }

    // Only a grant for the impostor's own file admits it, under a name of its own; withdrawn,
    // it is out again.
    let admitted = format!(
        "{}  widget@evil:\n    mode: shadow\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n",
        grants()
    );
    guests.reconfigure(config(&admitted)).unwrap();
    assert_eq!(
        running(&guests),
        [
            ("widget".to_owned(), "widget.wasm".to_owned()),
            ("widget@evil".to_owned(), "evil.wasm".to_owned()),
        ]
    );
    let mut events = guests.subscribe();
    guests.reconfigure(config(&grants())).unwrap();
    match events.try_recv() {
        Ok(GuestEvent::Unloaded(name)) => assert_eq!(name, "widget@evil"),
        other => panic!("expected an Unloaded event, got {other:?}"),
    }
    assert_eq!(running(&guests), rightful);
    assert_impostor(&guests, &impostor, "widget");
}

/// Waits for the next guest event from the watching task.
async fn next_event(events: &mut Receiver<GuestEvent>) -> GuestEvent {
    tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .expect("a guest event within 30 s")
        .expect("event channel open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_follows_temp_file_renames_and_configmap_symlink_swaps() {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &grants());
    let mut events = guests.subscribe();
    let watching = tokio::spawn(guests.clone().watch());

    // An editor or `kubectl cp`-style write: a temp file renamed into place.
    let tmp = dir.path().join(".widget.wasm.swp");
    copy("widget", &tmp);
    std::fs::rename(&tmp, dir.path().join("widget.wasm")).unwrap();
    let GuestEvent::Loaded(v1) = next_event(&mut events).await else {
        panic!("expected Loaded")
    };
    std::fs::remove_file(dir.path().join("widget.wasm")).unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        GuestEvent::Unloaded(_)
    ));

    // A ConfigMap volume: widget.wasm -> ..data/widget.wasm, ..data -> ..<timestamp>/, and an
    // update swaps the ..data symlink atomically to a new timestamped directory.
    let first = dir.path().join("..2026_11_22_01");
    std::fs::create_dir(&first).unwrap();
    copy("widget", &first.join("widget.wasm"));
    std::os::unix::fs::symlink("..2026_11_22_01", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/widget.wasm", dir.path().join("widget.wasm")).unwrap();
    let GuestEvent::Loaded(again) = next_event(&mut events).await else {
        panic!("expected Loaded")
    };
    assert_eq!(again.loaded.hash, v1.loaded.hash);

    let second = dir.path().join("..2026_11_22_02");
    std::fs::create_dir(&second).unwrap();
    copy("widget-v2", &second.join("widget.wasm"));
    std::os::unix::fs::symlink("..2026_11_22_02", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    let GuestEvent::Loaded(v2) = next_event(&mut events).await else {
        panic!("expected Loaded")
    };
    assert_ne!(v2.loaded.hash, v1.loaded.hash);
    watching.abort();
}

fn config(text: &str) -> HostConfig {
    HostConfig::parse(text, "host.yaml".as_ref()).unwrap()
}

#[test]
fn a_new_configuration_reloads_changed_grants_and_unloads_withdrawn_ones() {
    let dir = tempfile::tempdir().unwrap();
    let guests = directory(dir.path(), &grants());
    let mut events = guests.subscribe();
    copy("widget", &dir.path().join("widget.wasm"));
    guests.rescan();
    next_loaded(&mut events);
    let active = |g: &Guests| g.active()[0].grant.mode;
    assert_eq!(active(&guests), Mode::Active);

    // The same grants again: nothing happens.
    guests.reconfigure(config(&grants())).unwrap();
    assert!(
        events.try_recv().is_err(),
        "an unchanged grant reloads nothing"
    );

    // Shadow mode: the same file loaded again with the new grant.
    let shadow = grants().replace("  widget:\n", "  widget:\n    mode: shadow\n");
    assert_ne!(shadow, grants(), "the test grant changed");
    guests.reconfigure(config(&shadow)).unwrap();
    match events.try_recv() {
        Ok(GuestEvent::Loaded(guest)) => assert_eq!(guest.grant.mode, Mode::Shadow),
        other => panic!("expected a Loaded event, got {other:?}"),
    }
    assert_eq!(guests.statuses()[0].mode, Some(Mode::Shadow));

    // A configuration whose backends differ is refused whole.
    let err = guests
        .reconfigure(config(&format!(
            "{grants}\nbackends:\n  network: {{provider: memory}}\n",
            grants = grants()
        )))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("backends:"), "{err}");
    assert_eq!(
        active(&guests),
        Mode::Shadow,
        "the running configuration stays"
    );

    // The grant withdrawn: the guest stops, and says why.
    guests.reconfigure(config("guests: {}\n")).unwrap();
    match events.try_recv() {
        Ok(GuestEvent::Unloaded(name)) => assert_eq!(name, "widget"),
        other => panic!("expected an Unloaded event, got {other:?}"),
    }
    assert!(guests.active().is_empty());
    let status = &guests.statuses()[0];
    assert!(
        matches!(&status.state, FileState::Failed(r) if r.contains("has no grant")),
        "{status:?}"
    );

    // Granted again: loaded again.
    guests.reconfigure(config(&grants())).unwrap();
    next_loaded(&mut events);

    // A refused new content keeps the last good version, and a configuration change judges
    // that version, not the broken file: it stays, now in shadow mode.
    std::fs::write(dir.path().join("widget.wasm"), b"not wasm").unwrap();
    guests.rescan();
    assert!(events.try_recv().is_err());
    guests.reconfigure(config(&shadow)).unwrap();
    match events.try_recv() {
        Ok(GuestEvent::Loaded(guest)) => assert_eq!(guest.grant.mode, Mode::Shadow),
        other => panic!("expected a Loaded event, got {other:?}"),
    }
    let status = &guests.statuses()[0];
    assert!(
        matches!(&status.state, FileState::Failed(r) if r.contains("not a WebAssembly component")),
        "{status:?}"
    );
    assert_eq!(status.mode, Some(Mode::Shadow));
}

#[test]
fn a_grant_for_one_file_runs_a_second_version_beside_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let trial = grants().replace(
        "guests:\n",
        "guests:\n  widget@widget-next:\n    mode: shadow\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n",
    );
    assert_ne!(trial, grants(), "the test grant changed");
    let guests = directory(dir.path(), &trial);
    copy("widget", &dir.path().join("widget.wasm"));
    copy("widget-v2", &dir.path().join("widget-next.wasm"));
    guests.rescan();
    let statuses = guests.statuses();
    let mut running: Vec<(String, Mode)> = guests
        .active()
        .iter()
        .map(|g| (g.name().to_owned(), g.grant.mode))
        .collect();
    running.sort();
    assert_eq!(
        running,
        vec![
            ("widget".to_owned(), Mode::Active),
            ("widget@widget-next".to_owned(), Mode::Shadow),
        ],
        "{statuses:?}"
    );

    // The trial ends: a shadow guest never wrote its finalizer, so none is left orphaned
    // (the active version's finalizer is not the host's to release).
    std::fs::remove_file(dir.path().join("widget-next.wasm")).unwrap();
    guests.rescan();
    assert_eq!(guests.active().len(), 1);
    assert!(guests.orphan("widget@widget-next").is_none());
}

#[test]
fn an_items_own_grant_swaps_without_a_new_content_and_a_refused_one_keeps_the_last_good() {
    use reconciler_host::config::Grant;
    use reconciler_host::supply::guest_set::Verdict;

    const ALLOW: &str = "reconcilers:\n  allow:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n";
    let source = common::objects::Objects::default();
    let runtime = Arc::new(
        Runtime::new(&RuntimeOptions {
            cache_dir: Some(common::cache_dir()),
            ..RuntimeOptions::default()
        })
        .unwrap(),
    );
    let config = HostConfig::parse(ALLOW, "host.yaml".as_ref()).unwrap();
    let guests = Guests::new(
        source.clone(),
        runtime,
        Arc::new(config.clone()),
        None,
        Arc::new(Shadows::new(None)),
    );
    let mut events = guests.subscribe();
    let grant = |text: &str| -> Grant { serde_yaml::from_str(text).unwrap() };
    let widget_grant = "{read: [test.reconciler.dev/v1/Widget, v1/ConfigMap], write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]}";
    let bytes = std::fs::read(common::guest("widget")).unwrap();
    let last = || source.verdicts.lock().last().cloned().unwrap();
    // The object at `generation` with `grant`, then a rescan.
    let declare = |generation: i64, grant: Grant| {
        let item = (generation, grant, bytes.clone());
        source.items.lock().insert("w".into(), item);
        guests.rescan();
    };

    // Loaded under the object's name with its own grant.
    declare(1, grant(widget_grant));
    let v1 = next_loaded(&mut events);
    assert_eq!(guests.active()[0].name(), "widget@w");
    assert!(
        matches!(last(), (_, 1, Verdict::Loaded { .. })),
        "{:?}",
        last()
    );

    // Same content, a new grant (shadow): reloaded with it, no new compile of another content.
    let shadow = widget_grant.replacen('{', "{mode: shadow, ", 1);
    declare(2, grant(&shadow));
    assert_eq!(next_loaded(&mut events), v1);
    assert_eq!(guests.active()[0].grant.mode, Mode::Shadow);
    assert!(
        matches!(last(), (_, 2, Verdict::Loaded { .. })),
        "{:?}",
        last()
    );

    // A grant beyond the ceiling: refused with its cause, the shadow version keeps running.
    let beyond = widget_grant.replacen("v1/ConfigMap]", "v1/ConfigMap, v1/Secret]", 1);
    declare(3, grant(&beyond));
    assert!(
        events.try_recv().is_err(),
        "a refused grant changed the set"
    );
    assert_eq!(guests.active()[0].grant.mode, Mode::Shadow);
    match last() {
        (
            _,
            3,
            Verdict::Refused {
                cause,
                message,
                kept,
            },
        ) => {
            assert_eq!(cause, "GrantBeyondAllowed");
            assert!(message.contains("read v1/Secret"), "{message}");
            assert_eq!(kept.map(|(guest, _)| guest).as_deref(), Some("widget@w"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    // The ceiling lowered under the running version: revoked, so it stops.
    let lower = ALLOW.replace(", v1/ConfigMap]\n    write", "]\n    write");
    guests
        .reconfigure(HostConfig::parse(&lower, "host.yaml".as_ref()).unwrap())
        .unwrap();
    assert!(guests.active().is_empty(), "a revoked grant kept running");
    assert!(matches!(events.try_recv(), Ok(GuestEvent::Unloaded(name)) if name == "widget@w"));
}

/// A finalizer belongs to one guest: the host removes it after its guest's reconcile of a
/// deleted object, and releases it when that guest is unloaded. A second active guest on the
/// same kind declaring it would have it removed before the first had cleaned up, so it is
/// refused, whichever came first; in shadow mode (which never touches the finalizer) it runs,
/// and a configuration that switches it to active keeps it from taking the finalizer up.
#[test]
fn a_second_active_guest_holding_anothers_finalizer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let grant = |mode: &str| {
        grants().replace(
            "guests:\n",
            &format!("guests:\n  widget@widget-twin:\n    mode: {mode}\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget]\n"),
        )
    };
    let guests = directory(dir.path(), &grant("active"));
    let twin = dir.path().join("widget-twin.wasm");
    copy("widget", &dir.path().join("widget.wasm"));
    copy("widget-v2", &twin);
    guests.rescan();
    // Which of the two loads first depends on the directory's order; exactly one runs, and
    // the other's refusal names the finalizer and its holder.
    let active = running(&guests);
    assert_eq!(active.len(), 1, "{active:?}");
    let refused: Vec<_> = guests
        .statuses()
        .into_iter()
        .filter(|s| matches!(&s.state, FileState::Failed(r) if r.contains("finalizer `test.reconciler.dev/cleanup`") && r.contains("is held by guest")))
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", guests.statuses());

    // In shadow mode the twin runs beside the active guest.
    let guests = directory(dir.path(), &grant("shadow"));
    guests.rescan();
    assert_eq!(
        running(&guests),
        vec![
            ("widget".to_owned(), "widget.wasm".to_owned()),
            (
                "widget@widget-twin".to_owned(),
                "widget-twin.wasm".to_owned()
            ),
        ]
    );
    // Promoted to active while the other holds the finalizer: unloaded, not running both.
    guests.reconfigure(config(&grant("active"))).unwrap();
    assert_eq!(
        running(&guests),
        vec![("widget".to_owned(), "widget.wasm".to_owned())],
        "{:?}",
        guests.statuses()
    );
}

/// Declared items: each origin and its component's bytes.
type Items = Vec<(reconciler_host::supply::guest_set::Origin, Vec<u8>)>;

/// Items of both kinds, held in memory: an operator's `ClusterReconciler`s and tenants'
/// namespaced `Reconciler`s, each with its grant and component.
#[derive(Default, Clone)]
struct Declared {
    items: Arc<parking_lot::Mutex<Items>>,
    verdicts: Arc<parking_lot::Mutex<Vec<(String, reconciler_host::supply::guest_set::Verdict)>>>,
}

impl reconciler_host::supply::guest_set::GuestSource for Declared {
    fn list(
        &self,
    ) -> Result<
        Vec<reconciler_host::supply::guest_set::Origin>,
        reconciler_host::supply::guest_set::SourceError,
    > {
        Ok(self.items.lock().iter().map(|(o, _)| o.clone()).collect())
    }

    fn read(
        &self,
        origin: &reconciler_host::supply::guest_set::Origin,
    ) -> Result<
        reconciler_host::supply::guest_set::Artefact,
        reconciler_host::supply::guest_set::SourceError,
    > {
        let items = self.items.lock();
        let (_, bytes) = items
            .iter()
            .find(|(o, _)| o.stem() == origin.stem())
            .unwrap();
        Ok(reconciler_host::supply::guest_set::Artefact {
            origin: origin.clone(),
            bytes: bytes.clone(),
            hash: reconciler_host::sandbox::runtime::content_hash(bytes),
            signed_by: None,
        })
    }

    fn watch(
        &self,
    ) -> Result<
        Box<dyn reconciler_host::supply::guest_set::Changes>,
        reconciler_host::supply::guest_set::SourceError,
    > {
        Err(reconciler_host::supply::guest_set::SourceError::Stopped {
            what: "an in-memory source".into(),
        })
    }

    fn holds(&self, _origin: &reconciler_host::supply::guest_set::Origin) -> bool {
        true
    }

    fn judged(
        &self,
        origin: &reconciler_host::supply::guest_set::Origin,
        verdict: &reconciler_host::supply::guest_set::Verdict,
    ) {
        self.verdicts
            .lock()
            .push((origin.stem().to_owned(), verdict.clone()));
    }
}

/// A guest set over [`Declared`] items under a configuration whose tenant rule (namespace
/// `team-a`) allows Widgets at `v1` and `v1beta1`.
struct FinalizerWorld {
    source: Declared,
    guests: Arc<Guests>,
}

impl FinalizerWorld {
    fn new() -> Self {
        const CONFIG: &str = "reconcilers:\n  allow:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n  tenants:\n  - name: teams\n    namespaces: [team-a]\n    allow:\n      read: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1beta1/Widget, v1/ConfigMap]\n      write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, test.reconciler.dev/v1beta1/Widget, test.reconciler.dev/v1beta1/Widget/status, v1/ConfigMap]\n";
        let source = Declared::default();
        let runtime = Arc::new(
            Runtime::new(&RuntimeOptions {
                cache_dir: Some(common::cache_dir()),
                ..RuntimeOptions::default()
            })
            .unwrap(),
        );
        let guests = Guests::new(
            source.clone(),
            runtime,
            Arc::new(HostConfig::parse(CONFIG, "host.yaml".as_ref()).unwrap()),
            None,
            Arc::new(Shadows::new(None)),
        );
        Self { source, guests }
    }

    /// The items now, then a rescan.
    fn set(&self, items: Vec<(reconciler_host::supply::guest_set::Origin, Vec<u8>)>) {
        *self.source.items.lock() = items;
        self.guests.rescan();
    }

    /// The guests running, by name.
    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self
            .guests
            .active()
            .iter()
            .map(|g| g.name().to_owned())
            .collect();
        n.sort();
        n
    }

    /// The last verdict on `item`, in a word.
    fn cause_of(&self, item: &str) -> Option<String> {
        use reconciler_host::supply::guest_set::Verdict;
        self.source
            .verdicts
            .lock()
            .iter()
            .rev()
            .find(|(name, _)| name == item)
            .map(|(_, v)| match v {
                Verdict::Refused { cause, .. } => (*cause).to_owned(),
                Verdict::Loaded { .. } => "Loaded".to_owned(),
                Verdict::Unloaded => "Unloaded".to_owned(),
            })
    }
}

/// A grant of Widgets at `version`, in `mode`.
fn widget_grant_at(version: &str, mode: &str) -> reconciler_host::config::Grant {
    serde_yaml::from_str(&format!("{{mode: {mode}, read: [test.reconciler.dev/{version}/Widget, v1/ConfigMap], write: [test.reconciler.dev/{version}/Widget, test.reconciler.dev/{version}/Widget/status, v1/ConfigMap]}}")).unwrap()
}

/// A tenant's Reconciler `name` in namespace `team-a`.
fn team_a(name: &str, version: &str) -> reconciler_host::supply::guest_set::Origin {
    reconciler_host::supply::guest_set::Origin::tenant_reconciler(
        name,
        1,
        widget_grant_at(version, "active"),
        reconciler_host::supply::guest_set::Tenant::new(
            "team-a",
            std::collections::BTreeMap::default(),
            None,
        ),
    )
}

/// A tenant's guest never takes a finalizer from, blocks or unloads a guest of the operator:
/// an operator's guest declaring the finalizer a tenant's holds takes it (the tenant's is
/// refused, `FinalizerReserved`), in shadow mode too, so that its trial can be promoted; a
/// tenant's declaring an operator's is refused; and a guest refused for a finalizer is judged
/// again as soon as its holder goes, without another change.
#[test]
fn a_tenants_guest_never_holds_an_operators_finalizer_and_a_freed_one_is_taken_at_once() {
    use reconciler_host::supply::guest_set::Origin;
    let world = FinalizerWorld::new();
    // Both declare finalizer test.reconciler.dev/cleanup on Widgets.
    let tenant = team_a("w", "v1");
    let operator = |mode: &str| Origin::reconciler("op", 1, widget_grant_at("v1", mode));
    let widget = std::fs::read(common::guest("widget")).unwrap();
    let twin = std::fs::read(common::guest("widget-v2")).unwrap();

    // The tenant's guest first, alone: it runs.
    world.set(vec![(tenant.clone(), widget.clone())]);
    assert_eq!(world.names(), ["widget@team-a.w"]);
    // The operator's arrives with the same finalizer: it runs, the tenant's is refused.
    world.set(vec![
        (tenant.clone(), widget.clone()),
        (operator("active"), twin.clone()),
    ]);
    assert_eq!(
        world.names(),
        ["widget@op"],
        "{:?}",
        world.guests.statuses()
    );
    assert_eq!(
        world.cause_of(tenant.stem()).as_deref(),
        Some("FinalizerReserved")
    );
    // Rescans change nothing: the operator's keeps it.
    world.guests.rescan();
    assert_eq!(world.names(), ["widget@op"]);
    // The operator's removed: the tenant's is judged again at once, and runs.
    world.set(vec![(tenant.clone(), widget.clone())]);
    assert_eq!(
        world.names(),
        ["widget@team-a.w"],
        "{:?}",
        world.guests.statuses()
    );
    // An operator's shadow trial reserves its finalizer too: the tenant's stops for it.
    world.set(vec![
        (tenant.clone(), widget.clone()),
        (operator("shadow"), twin.clone()),
    ]);
    assert_eq!(
        world.names(),
        ["widget@op"],
        "{:?}",
        world.guests.statuses()
    );
    assert_eq!(
        world.cause_of(tenant.stem()).as_deref(),
        Some("FinalizerReserved")
    );
    // Promoted, it is not blocked by anything of the tenant's.
    world.set(vec![
        (tenant.clone(), widget.clone()),
        (operator("active"), twin.clone()),
    ]);
    assert_eq!(
        world.names(),
        ["widget@op"],
        "{:?}",
        world.guests.statuses()
    );
    assert_eq!(world.guests.active()[0].grant.mode, Mode::Active);
}

/// The same kind at another version is the same objects, so the same finalizer; and between
/// the operator's own guests, the second is refused while the first holds it and runs as soon
/// as the first goes.
#[test]
fn a_finalizer_is_one_across_a_kinds_versions_and_a_freed_one_is_taken_at_once() {
    use reconciler_host::supply::guest_set::Origin;
    let world = FinalizerWorld::new();
    let operator = Origin::reconciler("op", 1, widget_grant_at("v1", "active"));
    let widget = std::fs::read(common::guest("widget")).unwrap();
    let twin = std::fs::read(common::guest("widget-v2")).unwrap();
    let beta = std::fs::read(common::guest("widget-beta")).unwrap();
    let tenant_beta = team_a("beta", "v1beta1");
    world.set(vec![
        (operator.clone(), twin.clone()),
        (tenant_beta.clone(), beta.clone()),
    ]);
    assert_eq!(
        world.names(),
        ["widget@op"],
        "{:?}",
        world.guests.statuses()
    );
    assert_eq!(
        world.cause_of(tenant_beta.stem()).as_deref(),
        Some("FinalizerReserved")
    );
    let second = Origin::reconciler("op2", 1, widget_grant_at("v1", "active"));
    world.set(vec![
        (operator.clone(), twin.clone()),
        (second.clone(), widget.clone()),
    ]);
    assert_eq!(world.names(), ["widget@op"]);
    assert_eq!(
        world.cause_of(second.stem()).as_deref(),
        Some("FinalizerConflict")
    );
    world.set(vec![(second.clone(), widget.clone())]);
    assert_eq!(
        world.names(),
        ["widget@op2"],
        "{:?}",
        world.guests.statuses()
    );
}

/// The first pass (what `/readyz` waits for) ends once every file present at start has a
/// verdict: loaded, or refused, which does not hold readiness back.
#[test]
fn the_first_pass_ends_when_every_file_present_is_judged() {
    let dir = tempfile::tempdir().unwrap();
    copy("widget", &dir.path().join("widget.wasm"));
    std::fs::write(dir.path().join("broken.wasm"), b"not a component").unwrap();
    let guests = directory(dir.path(), &grants());
    let pass = guests.first_pass();
    assert!(
        matches!(&*pass.borrow(), FirstPass::Waiting(why) if why.contains("not been read")),
        "{:?}",
        *pass.borrow()
    );
    guests.rescan();
    assert_eq!(*pass.borrow(), FirstPass::Done);
    let states: Vec<FileState> = guests.statuses().into_iter().map(|s| s.state).collect();
    assert!(states.contains(&FileState::Loaded), "{states:?}");
    assert!(
        states.iter().any(|s| matches!(s, FileState::Failed(_))),
        "{states:?}"
    );
}

/// A directory that says it is not listed whole yet, as the `ClusterReconciler` objects are
/// before their first list arrives.
struct NotListedYet(Directory);

impl GuestSource for NotListedYet {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        self.0.list()
    }
    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        self.0.read(origin)
    }
    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        self.0.watch()
    }
    fn holds(&self, origin: &Origin) -> bool {
        self.0.holds(origin)
    }
    fn unsettled(&self) -> Option<String> {
        Some("the objects are not listed yet".into())
    }
}

/// Loading what a source listed so far does not end the first pass while the source says
/// its list is not whole; the reason is the source's.
#[test]
fn the_first_pass_waits_for_a_source_listed_whole() {
    let dir = tempfile::tempdir().unwrap();
    copy("widget", &dir.path().join("widget.wasm"));
    let runtime = Arc::new(
        Runtime::new(&RuntimeOptions {
            cache_dir: Some(common::cache_dir()),
            ..RuntimeOptions::default()
        })
        .unwrap(),
    );
    let config = Arc::new(HostConfig::parse(&grants(), "host.yaml".as_ref()).unwrap());
    let guests = Guests::new(
        NotListedYet(Directory::new(dir.path().to_owned())),
        runtime,
        config,
        None,
        Arc::new(Shadows::new(None)),
    );
    guests.rescan();
    assert_eq!(guests.active().len(), 1, "what was listed is loaded");
    assert_eq!(
        *guests.first_pass().borrow(),
        FirstPass::Waiting("the objects are not listed yet".into())
    );
}
