"""``.proto`` text → descriptors, with the ``protoc`` that ``grpcio-tools`` bundles.

Registries hand out Protobuf schemas as ``.proto`` text (Apicurio's Confluent-compatible API
stores nothing else), and the Python runtime cannot parse text: it builds message classes
from descriptors. A hand-written parser would be a second, partial Protobuf compiler; the real
one ships in a wheel (``grpc_tools``), well-known types' ``.proto`` files included.

:func:`registry_proto_files` gathers a schema and everything it imports from the registry
(its ``references``, recursively, each written under its reference ``name``);
:func:`compile_files` runs ``python -m grpc_tools.protoc --include_imports
--descriptor_set_out`` over them in a temporary directory, in a subprocess so that protoc's
diagnostics (written by C++ to the process's stderr) are captured into the error, and returns
the ``FileDescriptorSet``. Imports of ``google/protobuf/*.proto`` resolve from
``grpc_tools``' own include directory. The set is kept per process for the same texts (a
stage worker stages many ranges of one schema; protoc costs a Python start-up, ~0.2 s, which
the native stage kernel's ranges otherwise pay per range): callers only read it. It is also
kept on disk, in a directory of this user's own (``resources/temp_dirs.py``), by a digest of
the texts and of ``grpc_tools``' version: every stage run starts fresh workers, and each
used to run protoc again for the schemas it had compiled the run before (~0.17 s of a
200,000-message run's ~0.7 s; issue 26). A cached set is the bytes protoc wrote for the same
input; one that does not parse is compiled again.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path, PurePosixPath

from google.protobuf import descriptor_pb2

from kbqe_dagster.core.errors import UnmappableProtobufSchemaError
from kbqe_dagster.resources.schema_registry import RegisteredSchema, SchemaLookup
from kbqe_dagster.resources.temp_dirs import private_temp_dir

ROOT_FILE = "kbqe_registry_schema.proto"
"""The name the framed schema's own text is compiled under (it has no import path of its
own; the file name is not part of any message's full name)."""
_MAX_FILES = 200
_TIMEOUT_S = 60


def registry_proto_files(lookup: SchemaLookup, schema: RegisteredSchema) -> dict[str, str]:
    """Import path → ``.proto`` text: ``schema`` as :data:`ROOT_FILE` and every subject version
    it references, transitively. A missing reference raises
    :class:`UnmappableProtobufSchemaError`."""
    files = {ROOT_FILE: schema.schema}
    pending = list(schema.references)
    while pending:
        reference = pending.pop()
        if reference.name in files:
            continue
        found = lookup.get_reference(reference)
        if found is None:
            raise UnmappableProtobufSchemaError(
                f"its reference {reference.name!r} (subject {reference.subject!r} version "
                f"{reference.version}) is not in the registry"
            )
        files[reference.name] = found.schema
        pending.extend(found.references)
        if len(files) > _MAX_FILES:
            raise UnmappableProtobufSchemaError(f"more than {_MAX_FILES} referenced files")
    return files


def compile_files(
    files: Mapping[str, str], root: str = ROOT_FILE
) -> descriptor_pb2.FileDescriptorSet:
    """Compile ``root`` among ``files`` (import path → text); the set holds ``root`` and every
    file it imports, dependencies first. Raises :class:`UnmappableProtobufSchemaError` with
    protoc's diagnostics. The same texts compile once per process (a refusal is not kept):
    the set returned is shared, not to be changed."""
    return _compile(tuple(sorted(files.items())), root)


CACHE_DIR = "kbqe-protoc-cache"
"""The on-disk cache of compiled sets: ``<temp dir>/kbqe-protoc-cache-<uid>``."""


@functools.lru_cache(maxsize=64)
def _compile(files: tuple[tuple[str, str], ...], root: str) -> descriptor_pb2.FileDescriptorSet:
    cache = private_temp_dir(CACHE_DIR)
    cached = cache / f"{_digest(files, root)}.desc" if cache is not None else None
    if cached is not None and cached.is_file():
        try:
            return descriptor_pb2.FileDescriptorSet.FromString(cached.read_bytes())
        except Exception:  # noqa: BLE001 - a damaged entry: compile again (and rewrite it)
            pass
    data = _protoc(files, root)
    if cached is not None:
        # Written whole, then renamed: a concurrent reader sees the old state or the set.
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        try:
            partial.write_bytes(data)
            partial.replace(cached)
        except OSError:
            partial.unlink(missing_ok=True)  # a full disk: the next run compiles again
    return descriptor_pb2.FileDescriptorSet.FromString(data)


def _digest(files: tuple[tuple[str, str], ...], root: str) -> str:
    """What a compiled set depends on: the texts by import path, the root, and protoc (the
    version of ``grpc_tools``, whose ``protoc`` and well-known types compile them)."""
    from importlib.metadata import version

    h = hashlib.sha256()
    for part in (version("grpcio-tools"), root, *(x for pair in files for x in pair)):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def _protoc(files: tuple[tuple[str, str], ...], root: str) -> bytes:
    """The serialized ``FileDescriptorSet`` protoc compiles ``root`` among ``files`` to."""
    include = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="kbqe-protoc-") as tmp:
        for name, text in files:
            path = _safe_path(Path(tmp), name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        out = Path(tmp) / "kbqe.descriptor_set"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--proto_path={tmp}",
                f"--proto_path={include}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                root,
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            diagnostics = " ".join((done.stderr or done.stdout).replace(tmp + "/", "").split())
            raise UnmappableProtobufSchemaError(f"does not compile: {diagnostics[:800]}")
        return out.read_bytes()


def _safe_path(root: Path, name: str) -> Path:
    """A reference name as a path inside ``root``: registries accept any string as a name."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise UnmappableProtobufSchemaError(
            f"reference name {name!r} is not a relative import path"
        )
    return root.joinpath(*relative.parts)
