import time

from reconciler_guest import conditions


def at(seconds, condition):
    condition["lastTransitionTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    return condition


def test_now_is_rfc3339_utc_truncated_to_whole_seconds(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1767323045.987)
    assert conditions.now() == "2026-01-02T03:04:05Z"


def test_new_has_the_metav1_condition_shape(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1767323045.5)
    assert conditions.new("Ready", True, "Synced", "up", 3) == {
        "type": "Ready",
        "status": "True",
        "reason": "Synced",
        "message": "up",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
        "observedGeneration": 3,
    }
    assert conditions.new("Ready", False, "Down", "")["status"] == "False"
    assert conditions.new("Ready", "Unknown", "Starting", "")["status"] == "Unknown"
    assert "observedGeneration" not in conditions.new("Ready", True, "Synced", "up")


def test_set_adds_a_missing_type():
    conds = []
    assert conditions.set(conds, conditions.new("Ready", True, "Synced", "ok"))
    assert conditions.is_true(conds, "Ready")
    assert not conditions.is_true(conds, "Degraded")
    assert conditions.find(conds, "Degraded") is None


def test_set_stamps_an_added_condition_that_has_no_time():
    conds = []
    assert conditions.set(conds, {"type": "Ready", "status": "True", "reason": "R", "message": ""})
    assert conds[0]["lastTransitionTime"].endswith("Z")


def test_set_keeps_transition_time_while_status_is_unchanged():
    conds = [at(100, conditions.new("Ready", False, "BackendError", "down"))]
    changed = conditions.set(
        conds, at(200, conditions.new("Ready", False, "BackendError", "still down"))
    )
    assert changed, "the message changed"
    assert conds == [at(100, conditions.new("Ready", False, "BackendError", "still down"))]


def test_set_moves_transition_time_when_status_flips():
    conds = [at(100, conditions.new("Ready", False, "BackendError", "down"))]
    assert conditions.set(conds, at(200, conditions.new("Ready", True, "Synced", "up")))
    assert conds == [at(200, conditions.new("Ready", True, "Synced", "up"))]


def test_set_reports_no_change_for_an_identical_condition():
    conds = [at(100, conditions.new("Ready", True, "Synced", "up", 2))]
    assert not conditions.set(conds, at(300, conditions.new("Ready", True, "Synced", "up", 2)))
    assert conds[0]["lastTransitionTime"] == at(100, {})["lastTransitionTime"]


def test_set_makes_reason_message_and_observed_generation_follow():
    conds = [
        at(100, conditions.new("Ready", True, "Synced", "up", 1)),
        at(100, conditions.new("Degraded", False, "Fine", "")),
    ]
    assert conditions.set(conds, at(200, conditions.new("Ready", True, "Resynced", "up again", 2)))
    assert conds[0] == at(100, conditions.new("Ready", True, "Resynced", "up again", 2))
    assert conditions.set(conds, at(200, conditions.new("Ready", True, "Resynced", "up again")))
    assert "observedGeneration" not in conds[0]
    assert conds[1] == at(100, conditions.new("Degraded", False, "Fine", "")), (
        "other types untouched"
    )
    assert len(conds) == 2


def test_remove_drops_only_the_named_type():
    conds = [
        conditions.new("Ready", True, "Synced", "up"),
        conditions.new("Degraded", False, "Fine", ""),
    ]
    assert conditions.remove(conds, "Ready")
    assert not conditions.remove(conds, "Ready")
    assert [c["type"] for c in conds] == ["Degraded"]
