"""Directories of this user's own under the system temp dir, for what stage workers keep
between tasks and runs: their work directories (staging/workdirs.py) and compiled Protobuf
descriptors (resources/protobuf_compiler.py)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def private_temp_dir(name: str) -> Path | None:
    """``<temp dir>/<name>-<uid>``, created mode 0700 if missing; None when it cannot be
    trusted — not a directory (a symlink, say), another user's, or open to others — or not
    created: callers then do without it. A fixed name under a shared ``/tmp`` could be made
    first by someone else; what it holds is only used when this user owns it alone."""
    uid = os.getuid()
    path = Path(tempfile.gettempdir()) / f"{name}-{uid}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return None
    return path
