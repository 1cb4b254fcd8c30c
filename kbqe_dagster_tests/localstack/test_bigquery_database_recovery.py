"""A BigQuery emulator killed in the middle of a write can leave a DuckDB write-ahead log that
no longer replays; the emulator then exits at every start ("Failure while replaying WAL
file") and ``kbqe stack up`` failed for good. ``up`` now moves that database aside (kept) and
starts an empty one. The emulator process is stood in for by a small Python process with the
same behaviour (exit with DuckDB's words while the old database is there, serve otherwise),
started through the real ``spawn`` and pid file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import spawn
from kbqe_dagster.localstack.bigquery import WAL_REPLAY_FAILURE, BigQueryEmulatorService

OPENS = """
import sys, time
from pathlib import Path
if (Path(sys.argv[1]) / "bqemulator.duckdb.wal").exists():
    print("_duckdb.DependencyException: Dependency Error: " + sys.argv[2] + ' "x.wal": '
          "Cannot drop entry", flush=True)
    sys.exit(1)
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[1]) / "serving").write_text("yes")
time.sleep(60)
"""


class StandInEmulator(BigQueryEmulatorService):
    start_timeout = 15.0
    message = WAL_REPLAY_FAILURE

    @property
    def ports(self):
        return ()

    def install(self) -> None:
        pass

    def launch(self) -> int:
        return spawn(self.dirs, [sys.executable, "-c", OPENS, str(self.database_dir), self.message])

    def ready(self) -> bool:
        return (self.database_dir / "serving").exists()


@pytest.fixture
def emulator(tmp_path: Path):
    service = StandInEmulator(home=tmp_path, gcs_root=tmp_path / "gcs")
    service.database_dir.mkdir(parents=True)
    (service.database_dir / "bqemulator.duckdb.wal").write_text("a log that does not replay")
    yield service
    service.down()


def test_a_database_whose_log_does_not_replay_is_kept_aside_and_the_emulator_starts(
    emulator,
    caplog,
) -> None:
    status = emulator.up()
    assert status.running
    kept = [p for p in emulator.database_dir.parent.iterdir() if ".unreplayable-" in p.name]
    assert len(kept) == 1
    assert (kept[0] / "bqemulator.duckdb.wal").read_text() == "a log that does not replay"
    assert (emulator.database_dir / "serving").exists()
    assert str(kept[0]) in caplog.text


def test_any_other_start_up_failure_is_reported_and_the_database_left_alone(emulator) -> None:
    emulator.message = "Some other error"
    with pytest.raises(StackError, match="exited during start-up"):
        emulator.up()
    assert (emulator.database_dir / "bqemulator.duckdb.wal").exists()
    assert not [p for p in emulator.database_dir.parent.iterdir() if ".unreplayable-" in p.name]
