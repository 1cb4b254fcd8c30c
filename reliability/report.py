"""The suite's result: what was injected, what was produced, what BigQuery holds — as a
summary table for people and as JSON for CI and for comparing runs."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kbqe_dagster.cli.render import table
from reliability.verify import Accounting

# Every fault the suite injects; a run that did not inject each of them at least once
# proves nothing about the missing ones (``SuiteReport.missing_faults``).
STAGE_KILL_AVRO = "stage_kill_avro_uploaded"
STAGE_KILL_DONE = "stage_kill_done_created"
STAGE_KILL_FIRST_RANGE = "stage_kill_first_range"
LOAD_KILL_BEFORE_SUBMIT = "load_kill_before_submit"
LOAD_KILL_AFTER_SUBMIT = "load_kill_after_submit"
LOAD_KILL_MID_DELETE = "load_kill_mid_delete"
KAFKA_RESTART = "kafka_restart_mid_run"
REGISTRY_DOWN = "registry_down"
GCS_DOWN = "gcs_down_mid_upload"
BIGQUERY_REFUSES = "bigquery_refuses_load"
ZOMBIE = "zombie_concurrent_stage"
ZOMBIE_LATE = "zombie_late_upload"
MERGE_KILL = "keyed_merge_kill"
# delivery: storage_write (reliability/faults_storage_write.py)
SW_KILL_INTENT = "sw_kill_after_intent"
SW_KILL_BETWEEN_APPENDS = "sw_kill_between_appends"
SW_KILL_AFTER_LAST_APPEND = "sw_kill_after_last_append"
SW_ZOMBIE = "sw_zombie_between_appends"
BIGQUERY_RESTART = "bigquery_restart_mid_append"
# the same, on keyed topics whose changelogs are delivery: storage_write
KEYED_SW_KILL_INTENT = "keyed_sw_kill_after_intent"
KEYED_SW_KILL_BETWEEN_APPENDS = "keyed_sw_kill_between_appends"
KEYED_SW_KILL_AFTER_LAST_APPEND = "keyed_sw_kill_after_last_append"
KEYED_SW_ZOMBIE = "keyed_sw_zombie_between_appends"
KEYED_BIGQUERY_RESTART = "keyed_bigquery_restart_mid_append"

STAGE_KILLS = (STAGE_KILL_AVRO, STAGE_KILL_DONE)
LOAD_KILLS = (LOAD_KILL_BEFORE_SUBMIT, LOAD_KILL_AFTER_SUBMIT, LOAD_KILL_MID_DELETE)
SW_KILLS = (SW_KILL_INTENT, SW_KILL_BETWEEN_APPENDS, SW_KILL_AFTER_LAST_APPEND)
STORAGE_WRITE_FAULTS = (*SW_KILLS, SW_ZOMBIE, BIGQUERY_RESTART)
KEYED_STORAGE_WRITE_FAULTS = (
    KEYED_SW_KILL_INTENT,
    KEYED_SW_KILL_BETWEEN_APPENDS,
    KEYED_SW_KILL_AFTER_LAST_APPEND,
    KEYED_SW_ZOMBIE,
    KEYED_BIGQUERY_RESTART,
)
ALL_FAULTS = (
    *STAGE_KILLS,
    STAGE_KILL_FIRST_RANGE,
    *LOAD_KILLS,
    KAFKA_RESTART,
    REGISTRY_DOWN,
    GCS_DOWN,
    BIGQUERY_REFUSES,
    ZOMBIE,
    ZOMBIE_LATE,
    MERGE_KILL,
    *STORAGE_WRITE_FAULTS,
    *KEYED_STORAGE_WRITE_FAULTS,
)


@dataclass(frozen=True)
class FaultEvent:
    """One attempt to inject a fault: did it fire, and what the system did about it."""

    kind: str
    iteration: int | None
    injected: bool
    detail: str
    seconds: float


@dataclass
class SuiteReport:
    seed: int
    iterations: int
    long: bool
    run_id: str = ""
    topic: str = ""
    messages_produced: int = 0
    events: list[FaultEvent] = field(default_factory=list)
    accounting: Accounting = field(default_factory=Accounting)
    leftovers_deleted: int = 0
    """Re-uploads under committed names the load step deleted instead of loading."""
    keyed: dict = field(default_factory=dict)
    """The keyed tables after the merge kills: changes produced, rows, and how many rows or
    keys differ from the oracle (``wrong``, must be 0)."""
    keyed_seconds: float = 0.0
    keyed_storage_write: dict = field(default_factory=dict)
    """The keyed tables whose changelogs were delivered by storage_write, after their faults:
    changes produced, per mode the changelog's duplicates and losses by (partition, offset)
    and the current table's and history's differences from the oracle; ``wrong`` (must be 0)
    sums them."""
    seconds: float = 0.0
    error: str | None = None
    """Set when the run stopped early (a fault could not be injected, a check failed)."""

    @property
    def faults_injected(self) -> dict[str, int]:
        counts = Counter(e.kind for e in self.events if e.injected)
        extra = sorted(set(counts) - set(ALL_FAULTS))
        return {kind: counts.get(kind, 0) for kind in (*ALL_FAULTS, *extra)}

    @property
    def missing_faults(self) -> list[str]:
        return [kind for kind in ALL_FAULTS if self.faults_injected[kind] == 0]

    @property
    def passed(self) -> bool:
        return (
            self.error is None
            and not self.missing_faults
            and self.accounting.exactly_once
            and self.messages_produced > 0
            and self.accounting.produced == self.messages_produced
            and self.keyed.get("wrong") == 0
            and self.keyed_storage_write.get("wrong") == 0
        )

    def to_json(self) -> dict:
        a = self.accounting
        return {
            "passed": self.passed,
            "seed": self.seed,
            "iterations": self.iterations,
            "long": self.long,
            "run_id": self.run_id,
            "topic": self.topic,
            "seconds": round(self.seconds, 1),
            "faults_injected": self.faults_injected,
            "missing_faults": self.missing_faults,
            "messages_produced": self.messages_produced,
            "duplicates": a.duplicates,
            "losses": a.losses,
            "misplaced": a.misplaced,
            "unexpected": a.unexpected,
            "avro_left_in_staging": a.avro_left_in_staging,
            "leftovers_deleted": self.leftovers_deleted,
            "rows_loaded": a.rows_loaded,
            "storage_write": {name: asdict(count) for name, count in a.storage_write.items()},
            "dead_letters_loaded": a.dead_letters_loaded,
            "bad_inputs_by_reason": a.bad_by_reason,
            "by_step": a.by_step,
            "samples": a.samples,
            "keyed": self.keyed,
            "keyed_storage_write": self.keyed_storage_write,
            "error": self.error,
            "events": [asdict(e) for e in self.events],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    def render(self) -> str:
        a = self.accounting
        head = table(
            ("", ""),
            [
                ("result", "PASS" if self.passed else "FAIL"),
                ("seed", str(self.seed)),
                ("iterations", f"{self.iterations}{' (long)' if self.long else ''}"),
                ("topic", self.topic),
                ("seconds", f"{self.seconds:.1f}"),
                ("messages produced", str(self.messages_produced)),
                ("rows in tables", str(a.rows_loaded)),
                ("dead letters loaded", str(a.dead_letters_loaded)),
                ("duplicates found", str(a.duplicates)),
                ("losses found", str(a.losses)),
                ("misplaced", str(a.misplaced)),
                ("unexpected rows", str(a.unexpected)),
                ("avro left in staging", str(a.avro_left_in_staging)),
                (
                    "storage_write duplicates",
                    str(sum(c.duplicates for c in a.storage_write.values())),
                ),
                ("storage_write losses", str(sum(c.losses for c in a.storage_write.values()))),
                ("zombie leftovers deleted", str(self.leftovers_deleted)),
                ("keyed changes produced", str(self.keyed.get("changes_produced", "-"))),
                ("keyed rows/keys wrong", str(self.keyed.get("wrong", "-"))),
                *(
                    (f"keyed storage_write {label}", str(self.keyed_storage_write.get(key, "-")))
                    for key, label in (
                        ("changes_produced", "changes produced"),
                        ("changelog_duplicates", "changelog duplicates"),
                        ("changelog_losses", "changelog losses"),
                        ("wrong", "rows/keys wrong"),
                    )
                ),
            ],
        )
        attempts = Counter(e.kind for e in self.events)
        faults = table(
            ("fault", "injected", "attempts"),
            [
                (kind, str(n), str(attempts.get(kind, 0)))
                for kind, n in self.faults_injected.items()
            ],
        )
        reasons = table(
            ("bad input reason", "dead letters"),
            [(r, str(n)) for r, n in a.bad_by_reason.items()] or [("-", "0")],
        )
        appended = table(
            ("storage_write table", "expected", "rows", "duplicates", "losses", "misplaced"),
            [
                (
                    name,
                    *(
                        str(getattr(c, k))
                        for k in ("expected", "rows", "duplicates", "losses", "misplaced")
                    ),
                )
                for name, c in a.storage_write.items()
            ]
            or [("-", "0", "0", "0", "0", "0")],
        )
        parts = [head, faults, appended, reasons]
        wrong = [(step, c) for step, c in a.by_step.items() if a.errors_of(step)]
        if wrong:
            parts.append(
                table(
                    ("step with errors", "produced", "duplicates", "losses", "misplaced"),
                    [
                        (
                            step,
                            *(str(c[k]) for k in ("produced", "duplicates", "losses", "misplaced")),
                        )
                        for step, c in wrong
                    ],
                )
            )
        if a.samples:
            parts.append(
                "\n".join(f"{kind}: {', '.join(items)}" for kind, items in a.samples.items())
            )
        if self.error:
            parts.append(f"error: {self.error}")
        return "\n\n".join(parts)
