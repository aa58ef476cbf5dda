//! Per-key journals of the widget test guest (`spec.journal: true`: a `journal begin <key>` line
//! first, `journal end <key>` last, in the host's JSON log), rebuilt into the intervals in which
//! each replica reconciled each key, and the check that no key was reconciled by two replicas at
//! once. The sharding test reads them from host processes, the deploy test from Pods' logs
//! through a rolling upgrade.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::Value;

/// One replica's JSON log lines (with their `timestamp`), and until when it may have been
/// reconciling: its SIGKILL, or the end of the log.
pub struct Log<'a> {
    pub replica: String,
    pub lines: &'a [(SystemTime, Value)],
    pub until: SystemTime,
}

/// One reconcile as a replica's journal shows it.
#[derive(Clone, Debug)]
pub struct Interval {
    pub replica: String,
    pub begin: SystemTime,
    pub end: SystemTime,
    /// A `begin` without its `end`: the replica was killed (or cancelled the reconcile); it
    /// counts as running until the kill, or until the end of the log.
    pub unfinished: bool,
}

/// A JSON log line as the host writes it, with its `timestamp`; none for other lines.
pub fn json_line(line: &str) -> Option<(SystemTime, Value)> {
    let value: Value = serde_json::from_str(line).ok()?;
    let at = humantime::parse_rfc3339(value.get("timestamp")?.as_str()?).ok()?;
    Some((at, value))
}

/// Every journalled reconcile of `guest` in every log, by key (`namespace/name`).
pub fn journal(logs: &[Log<'_>], guest: &str) -> BTreeMap<String, Vec<Interval>> {
    let mut by_key: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for log in logs {
        let mut open: BTreeMap<String, SystemTime> = BTreeMap::new();
        let mut push = |key: String, begin, end, unfinished| {
            by_key.entry(key).or_default().push(Interval {
                replica: log.replica.clone(),
                begin,
                end,
                unfinished,
            });
        };
        for (at, line) in log.lines {
            // A line in a reconcile names its guest through the span, one elsewhere itself.
            let named = [&line["span"]["guest"], &line["fields"]["guest"]];
            if line["target"] != "guest" || !named.iter().any(|g| **g == guest) {
                continue;
            }
            let message = line["fields"]["message"].as_str().unwrap_or_default();
            let mut words = message.split_whitespace();
            let (Some("journal"), Some(what), Some(key)) =
                (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let key = key.to_owned();
            match what {
                // A second begin before the first one's end: the first never finished
                // (cancelled), so it counts as running for as long as possible.
                "begin" => {
                    if let Some(begin) = open.insert(key.clone(), *at) {
                        push(key, begin, log.until, true);
                    }
                }
                "end" => {
                    if let Some(begin) = open.remove(&key) {
                        push(key, begin, *at, false);
                    }
                }
                _ => {}
            }
        }
        for (key, begin) in open {
            push(key, begin, log.until, true);
        }
    }
    by_key
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_micros(at).to_string()
}

pub fn describe(i: &Interval) -> String {
    format!(
        "{} from {} to {}{}",
        i.replica,
        time(i.begin),
        time(i.end),
        if i.unfinished {
            " (begin without end: counted until the kill or the end of the log)"
        } else {
            ""
        }
    )
}

/// Every pair of intervals of the same key on two replicas that overlap.
pub fn overlaps(journal: &BTreeMap<String, Vec<Interval>>) -> Vec<String> {
    let mut found = Vec::new();
    for (key, intervals) in journal {
        for (i, a) in intervals.iter().enumerate() {
            for b in &intervals[i + 1..] {
                if a.replica != b.replica && a.begin < b.end && b.begin < a.end {
                    found.push(format!(
                        "{key} reconciled by {} and {} at once: {}; {}",
                        a.replica,
                        b.replica,
                        describe(a),
                        describe(b)
                    ));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn overlaps_name_the_key_and_both_replicas_and_back_to_back_reconciles_are_no_overlap() {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let interval = |replica: &str, begin, end| Interval {
            replica: replica.to_owned(),
            begin: at(begin),
            end: at(end),
            unfinished: false,
        };
        let journal = BTreeMap::from([
            (
                "ns/a".to_owned(),
                vec![
                    interval("r1", 0, 20),
                    interval("r2", 20, 40),
                    interval("r1", 40, 60),
                ],
            ),
            (
                "ns/b".to_owned(),
                vec![
                    interval("r1", 0, 20),
                    interval("r1", 10, 30),
                    interval("r3", 19, 25),
                ],
            ),
        ]);
        let found = overlaps(&journal);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found
                .iter()
                .all(|f| f.starts_with("ns/b reconciled by r1 and r3 at once"))
        );
    }

    #[test]
    fn a_begin_without_its_end_runs_until_the_replica_stopped() {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let line = |ms, message: &str| {
            (
                at(ms),
                serde_json::json!({"target": "guest", "fields": {"guest": "widget", "message": message}}),
            )
        };
        let lines = [
            line(0, "journal begin ns/a generation=1 version=1"),
            line(5, "journal end ns/a generation=1"),
            line(10, "journal begin ns/a generation=2 version=1"),
            line(12, "something else"),
        ];
        let journal = journal(
            &[Log {
                replica: "r1".into(),
                lines: &lines,
                until: at(100),
            }],
            "widget",
        );
        let intervals = &journal["ns/a"];
        assert_eq!(intervals.len(), 2);
        assert!(!intervals[0].unfinished && intervals[0].end == at(5));
        assert!(intervals[1].unfinished && intervals[1].end == at(100));
    }
}
