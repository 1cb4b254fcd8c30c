"""A directory of this user's own under the temp dir is used only when no one else could
have made or changed it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kbqe_dagster.resources.temp_dirs import private_temp_dir


def test_the_directory_is_made_private_and_reused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = private_temp_dir("kbqe-x")
    assert made == tmp_path / f"kbqe-x-{os.getuid()}"
    assert made.stat().st_mode & 0o777 == 0o700
    assert private_temp_dir("kbqe-x") == made


def test_a_symlink_or_a_directory_open_to_others_is_not_used(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"kbqe-link-{os.getuid()}").symlink_to(elsewhere)
    assert private_temp_dir("kbqe-link") is None
    shared = tmp_path / f"kbqe-open-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    assert private_temp_dir("kbqe-open") is None
