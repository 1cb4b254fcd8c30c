"""Reading and writing the load state file (``_kbqe/load_state.json``) in the staging area.

The model and its JSON live in ``core/load/state.py``; this module only moves bytes, in the
order ``plan_state_write`` gives (previous version to the backup, then the new state). A
write that changes nothing is skipped. An unreadable state raises ``StateFileError`` with
the recovery path and loading stops — it is never replaced by an empty state.
"""

from __future__ import annotations

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.load.state import (
    STATE_BACKUP,
    STATE_FILE,
    LoadState,
    encode_state,
    plan_state_write,
    read_state,
)
from kbqe_dagster.resources.staging_store import StagingStore

STATE_PREFIX = "_kbqe/"


class StateFile:
    """The load state of one staging area, as last read or written by this process."""

    def __init__(self, store: StagingStore) -> None:
        self.store = store
        self._content: bytes | None = None
        self.writes = 0

    def read(self) -> LoadState:
        names = {f.name for f in self.store.list(STATE_PREFIX)}
        current = self._read(STATE_FILE) if STATE_FILE in names else None
        backup = self._read(STATE_BACKUP) if STATE_BACKUP in names else None
        state = read_state(current, backup)
        self._content = current
        return state

    def _read(self, name: str) -> bytes | None:
        try:
            return self.store.read_bytes(name)
        except StagingError:  # deleted between the listing and the read
            return None

    def save(self, state: LoadState) -> None:
        """Replace the state file with ``state`` (backup first); no-op when unchanged."""
        for write in plan_state_write(state, self._content):
            self.store.put_bytes(write.path, write.content)
            self.writes += 1
        self._content = encode_state(state)
