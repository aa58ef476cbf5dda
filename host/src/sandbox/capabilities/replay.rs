//! Replay: every host call of a reconcile answered from a record instead of a provider
//! (`reconciler-host reconcile --replay`). The guest's calls are matched with the recorded ones
//! in order; the first call that differs (another call, other arguments, a call the record does
//! not have, or recorded calls the guest no longer makes) is the divergence reported. After a
//! divergence the replay carries on where it can: a call is answered by the next recorded call
//! of the same function, and only a call of a function the record has no more of is answered
//! `unavailable`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::HostError;

/// One import call, as the offline runner prints it: JSON payloads embedded as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub interface: &'static str,
    pub function: &'static str,
    pub args: Value,
    pub returned: Value,
}

/// One recorded call, as the offline runner and records write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedCall {
    pub(crate) interface: String,
    pub(crate) function: String,
    pub(crate) args: Value,
    pub(crate) returned: Value,
}

impl From<&Call> for RecordedCall {
    fn from(call: &Call) -> Self {
        Self {
            interface: call.interface.to_owned(),
            function: call.function.to_owned(),
            args: call.args.clone(),
            returned: call.returned.clone(),
        }
    }
}

/// Where a replayed guest first did something other than the recorded one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Divergence {
    /// Index of the call in the replay (0 = the guest's first host call).
    pub(crate) call: usize,
    pub(crate) reason: &'static str,
    /// The recorded call expected there, if any.
    pub(crate) recorded: Option<RecordedCall>,
    /// The call the replayed guest made there, if any (arguments only).
    pub(crate) replayed: Option<Value>,
}

/// The recorded calls of one reconcile and how far the replay has come.
#[derive(Debug)]
pub(crate) struct Replayer {
    recorded: Vec<RecordedCall>,
    used: Vec<bool>,
    /// The first recorded call not yet matched in order.
    next: usize,
    /// Calls the replayed guest has made.
    made: usize,
    divergence: Option<Divergence>,
}

impl Replayer {
    pub(crate) fn new(recorded: Vec<RecordedCall>) -> Self {
        Self {
            used: vec![false; recorded.len()],
            recorded,
            next: 0,
            made: 0,
            divergence: None,
        }
    }

    /// The recorded answer to this call: the `ok` value, or the error the host gave.
    pub(crate) fn answer(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: &Value,
    ) -> Result<Value, HostError> {
        let index = self.made;
        self.made += 1;
        let same_function = |c: &RecordedCall| c.interface == interface && c.function == function;
        let found = match self.recorded.get(self.next) {
            Some(expected) if same_function(expected) => {
                if expected.args != *args {
                    self.diverge(index, "different arguments", Some(self.next), args);
                }
                Some(self.next)
            }
            expected => {
                let later = (self.next..self.recorded.len())
                    .find(|&i| !self.used[i] && same_function(&self.recorded[i]));
                let reason = if expected.is_none() {
                    "a call the record does not have"
                } else {
                    "a different call"
                };
                let at = expected.is_some().then_some(self.next);
                self.diverge(index, reason, at, args);
                later
            }
        };
        let Some(found) = found else {
            return Err(HostError::Unavailable(format!(
                "replay: the record has no answer for {interface}.{function} here"
            )));
        };
        self.used[found] = true;
        self.next = found + 1;
        recorded_answer(&self.recorded[found].returned)
    }

    fn diverge(&mut self, call: usize, reason: &'static str, at: Option<usize>, args: &Value) {
        if self.divergence.is_none() {
            self.divergence = Some(Divergence {
                call,
                reason,
                recorded: at.map(|i| self.recorded[i].clone()),
                replayed: Some(args.clone()),
            });
        }
    }

    /// The first divergence, counting recorded calls the replayed guest never made.
    /// The recorded calls of `interface` apart from the rest (each keeps its order).
    pub(crate) fn split(self, interface: &str) -> (Vec<RecordedCall>, Replayer) {
        let (theirs, rest) = self
            .recorded
            .into_iter()
            .partition(|c| c.interface == interface);
        (theirs, Replayer::new(rest))
    }

    /// Outbound HTTP answered apart (see `super::http`): the first exchange that differed from
    /// its record, or one recorded and never asked for, unless an earlier divergence stands.
    pub(crate) fn http_diverged(
        &mut self,
        differed: Option<String>,
        unanswered: Option<RecordedCall>,
    ) {
        if self.divergence.is_some() {
            return;
        }
        self.divergence = match (differed, unanswered) {
            (Some(text), _) => Some(Divergence {
                call: self.made,
                reason: "a different HTTP request",
                recorded: None,
                replayed: Some(Value::String(text)),
            }),
            (None, Some(missed)) => Some(Divergence {
                call: self.made,
                reason: "a recorded HTTP request the guest did not make",
                recorded: Some(missed),
                replayed: None,
            }),
            (None, None) => None,
        };
    }

    pub(crate) fn finish(mut self) -> Option<Divergence> {
        if self.divergence.is_none()
            && let Some(missed) = self.used.iter().position(|used| !used)
        {
            self.divergence = Some(Divergence {
                call: self.made,
                reason: "a recorded call the guest did not make",
                recorded: Some(self.recorded[missed].clone()),
                replayed: None,
            });
        }
        self.divergence
    }
}

/// `{"ok": value}` or `{"error": {"<kind>": "<message>"}}`, as [`super::CallContext::finish`]
/// records them.
fn recorded_answer(returned: &Value) -> Result<Value, HostError> {
    if let Some(ok) = returned.get("ok") {
        return Ok(ok.clone());
    }
    if let Some((kind, message)) = returned
        .get("error")
        .and_then(Value::as_object)
        .and_then(|e| e.iter().next())
    {
        let message = message.as_str().unwrap_or_default().to_owned();
        return Err(match kind.as_str() {
            "denied" => HostError::Denied(message),
            "not-found" => HostError::NotFound(message),
            "conflict" => HostError::Conflict(message),
            "invalid" => HostError::Invalid(message),
            "unavailable" => HostError::Unavailable(message),
            _ => HostError::Other(message),
        });
    }
    // `log` records no answer.
    Ok(Value::Null)
}

/// A JSON text handed to the guest, from its recorded (embedded) form.
pub(crate) fn text(value: &Value) -> String {
    match value {
        // `embed` keeps what did not parse as JSON as a string.
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A recorded answer of the wrong shape (a hand-edited record).
pub(crate) fn malformed(what: &str) -> HostError {
    HostError::Other(format!("replay: the recorded answer is not {what}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(function: &str, args: Value, returned: Value) -> RecordedCall {
        RecordedCall {
            interface: "cluster".into(),
            function: function.into(),
            args,
            returned,
        }
    }

    fn record() -> Vec<RecordedCall> {
        vec![
            call("apply", json!({"n": 1}), json!({"ok": {"applied": 1}})),
            call(
                "patch-status",
                json!({"n": 2}),
                json!({"error": {"conflict": "stale"}}),
            ),
            call("delete", json!({"n": 3}), json!({"ok": true})),
        ]
    }

    #[test]
    fn the_same_calls_get_the_recorded_answers_and_no_divergence() {
        let mut replay = Replayer::new(record());
        assert_eq!(
            replay.answer("cluster", "apply", &json!({"n": 1})).unwrap(),
            json!({"applied": 1})
        );
        let refused = replay
            .answer("cluster", "patch-status", &json!({"n": 2}))
            .unwrap_err();
        assert_eq!(refused, HostError::Conflict("stale".into()));
        assert_eq!(
            replay
                .answer("cluster", "delete", &json!({"n": 3}))
                .unwrap(),
            json!(true)
        );
        assert_eq!(replay.finish(), None);
    }

    #[test]
    fn other_arguments_diverge_at_that_call_and_the_replay_carries_on() {
        let mut replay = Replayer::new(record());
        replay.answer("cluster", "apply", &json!({"n": 1})).unwrap();
        let answer = replay.answer("cluster", "patch-status", &json!({"n": 20}));
        assert_eq!(answer.unwrap_err(), HostError::Conflict("stale".into()));
        replay
            .answer("cluster", "delete", &json!({"n": 3}))
            .unwrap();
        let divergence = replay.finish().unwrap();
        assert_eq!(divergence.call, 1);
        assert_eq!(divergence.reason, "different arguments");
        assert_eq!(divergence.recorded.unwrap().function, "patch-status");
        assert_eq!(divergence.replayed, Some(json!({"n": 20})));
    }

    #[test]
    fn a_skipped_call_diverges_where_it_was_and_later_calls_still_match() {
        let mut replay = Replayer::new(record());
        replay.answer("cluster", "apply", &json!({"n": 1})).unwrap();
        assert!(
            replay
                .answer("cluster", "delete", &json!({"n": 3}))
                .unwrap()
                == json!(true)
        );
        let divergence = replay.finish().unwrap();
        assert_eq!(
            (divergence.call, divergence.reason),
            (1, "a different call")
        );
        assert_eq!(divergence.recorded.unwrap().function, "patch-status");
    }

    #[test]
    fn a_call_the_record_lacks_is_unavailable_and_fewer_calls_diverge_at_the_end() {
        let mut replay = Replayer::new(record());
        let missing = replay.answer("queue", "enqueue", &json!({})).unwrap_err();
        assert!(matches!(missing, HostError::Unavailable(m) if m.contains("queue.enqueue")));
        let divergence = replay.finish().unwrap();
        assert_eq!(
            (divergence.call, divergence.reason),
            (0, "a different call")
        );

        let mut fewer = Replayer::new(record());
        fewer.answer("cluster", "apply", &json!({"n": 1})).unwrap();
        let divergence = fewer.finish().unwrap();
        assert_eq!(
            (divergence.call, divergence.reason),
            (1, "a recorded call the guest did not make")
        );
        assert_eq!(divergence.replayed, None);

        let mut more = Replayer::new(Vec::new());
        assert!(more.answer("cluster", "apply", &json!({})).is_err());
        assert_eq!(
            more.finish().unwrap().reason,
            "a call the record does not have"
        );
    }
}
