"""The BigQuery Storage Write API: application-created streams, appends at an offset, finalize
and commit, with the API's answers normalised to what the delivery protocol decides on.

:class:`StorageWriter` is the interface the delivery sink sees; :class:`GoogleStorageWriter`
implements it over ``google.cloud.bigquery_storage_v1.BigQueryWriteClient`` for BigQuery and
for the local emulator alike (the emulator serves the same gRPC service on its own port; the
client then goes over an insecure channel, anonymously). What differs on the emulator is
pinned by ``kbqe_dagster_tests/resources/test_storage_write_on_local_stack.py`` and listed in
docs/architecture.md ("Local stack and its gaps").

Answers of one append (:class:`AppendOutcome`):

===================================== ================ ========================================
the API says                          ``kind``         the protocol does
===================================== ================ ========================================
an ``append_result``                  ``appended``     next batch
``ALREADY_EXISTS`` (gRPC 6)           already_exists   the rows at that offset are there:
                                                       an earlier attempt wrote them; skip
``OUT_OF_RANGE`` (gRPC 11)            out_of_range     the stream is not where it should be:
                                                       fail the range, never continue
``row_errors`` (with                  rows_refused     the rows named go to the dead letters
``INVALID_ARGUMENT``)                                  with the API's reason; none of the
                                                       request's rows was written
a transport error (UNAVAILABLE,       retried          with ``google.api_core`` retry, at the
INTERNAL, ABORTED, DEADLINE, UNKNOWN,                  same offset: a retry of an append that
a closed connection)                                   did land answers ``already_exists``
``NOT_FOUND`` (the stream is gone)    raises           :class:`WriteStreamNotFoundError`
anything else (INVALID_ARGUMENT       raises           :class:`StorageWriteError` naming
without row errors, a quota's                          dataset.table, the stream and the
RESOURCE_EXHAUSTED, ...)                               status; the range fails and is retried
                                                       by a later stage run
===================================== ================ ========================================

An append without an offset (``offset=None``) is not retried: nothing would tell a retry of a
request that landed from one that did not.

Connections. One ``BigQueryWriteClient`` (one gRPC channel) per process and settings
(:func:`write_client`), rebuilt after a fork: the stage tasks run in Spark's Python workers,
so the writer is built in the task from picklable :class:`StorageWriteSettings`, never
shipped. Per application-created stream the writer keeps one AppendRows connection open
across appends (the API allows one active connection per such stream, and opening one costs
a round trip); it is the client library's ``AppendRowsStream``, which sends the stream name
and writer schema on the first request of each connection, re-opening the connection after
the server closes it. A request carrying a different writer schema closes the stream's
connection and opens one with the new schema. ``finalize`` and ``close`` end connections.
Appends are synchronous: one request in flight per stream; ordering and offsets stay
trivially right, and a stage task writes one stream per (table, partition) at a time anyway.
An append looks for its answer every few milliseconds (:func:`_answer_polling`), not at the
library's long-running-operation pace (a second and more).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kbqe_dagster.core.errors import StorageWriteError, WriteStreamNotFoundError
from kbqe_dagster.core.formats.avro_proto import ProtoRows

log = logging.getLogger(__name__)

__all__ = [
    "AppendOutcome",
    "GoogleStorageWriter",
    "ProtoRows",
    "StorageWriteSettings",
    "StorageWriter",
    "StreamState",
    "write_client",
]

APPENDED = "appended"
ALREADY_EXISTS = "already_exists"
OUT_OF_RANGE = "out_of_range"
ROWS_REFUSED = "rows_refused"

_GRPC_ALREADY_EXISTS = 6
_GRPC_OUT_OF_RANGE = 11


@dataclass(frozen=True)
class AppendOutcome:
    """The API's answer to one AppendRows request, normalised (module docstring)."""

    kind: str
    """``appended`` | ``already_exists`` | ``out_of_range`` | ``rows_refused``."""
    message: str = ""
    """The API's text (status message); never credentials."""
    row_errors: tuple[tuple[int, str], ...] = ()
    """``rows_refused``: (row index in the request, the API's reason) per refused row."""
    offset: int | None = None
    """``appended``: the stream offset the API says the first row was written at (when it
    says, which it does for an append with an offset)."""


@dataclass(frozen=True)
class StreamState:
    """What GetWriteStream says of a stream."""

    name: str
    kind: str  # "committed" | "pending" | "buffered"
    create_time: dt.datetime | None
    commit_time: dt.datetime | None  # PENDING streams, once committed (BigQuery sets it)


class StorageWriter(Protocol):
    """The Storage Write API as the delivery protocol uses it (module docstring)."""

    def create_stream(self, dataset: str, table: str, kind: str = "committed") -> str:
        """An application-created stream (``committed`` | ``pending``) on ``dataset.table``;
        returns its full name. Expensive and rate-limited at the API: reuse streams."""
        ...

    def append(self, stream: str, rows: ProtoRows, offset: int | None) -> AppendOutcome:
        """One AppendRows request of ``rows`` at ``offset`` (``None``: no offset check);
        waits for its answer. Raises :class:`StorageWriteError` for anything not an
        :class:`AppendOutcome`."""
        ...

    def finalize(self, stream: str) -> int:
        """Seal ``stream`` against appends; its row count."""
        ...

    def commit(self, dataset: str, table: str, streams: Sequence[str]) -> None:
        """Make the rows of finalized PENDING ``streams`` visible, atomically."""
        ...

    def stream_state(self, stream: str) -> StreamState | None:
        """What the API says of ``stream``; ``None`` when it does not exist (any more)."""
        ...

    def release(self, stream: str) -> None:
        """This range is done with ``stream``: end its connection. The next range of the
        same (table, partition) may be staged by another process; the API allows one active
        connection per application-created stream, and a connection left open holds a
        server's worker for as long as it stays open."""
        ...

    def close(self) -> None:
        """End this writer's connections (the process's client stays)."""
        ...


@dataclass(frozen=True)
class StorageWriteSettings:
    """How to reach the Storage Write API: picklable, so a stage task builds its writer in
    the executor (:meth:`writer`). Chosen per environment in resources/environment.py."""

    project: str
    """The project of the tables written (and of the streams)."""
    grpc_endpoint: str | None = None
    """``host:port`` of the local emulator's gRPC port: an insecure channel, anonymous.
    ``None``: BigQuery, with ``gcp_credentials``."""
    gcp_credentials: str | None = field(default=None, repr=False)
    """The bigquery resource's (dagster-gcp's convention, resources/gcp_credentials.py): a
    base64 service account key, ``None`` for Application Default Credentials. Not in repr."""
    append_timeout_s: float = 120.0
    """How long one append waits for its answer, retries included."""

    def writer(self) -> GoogleStorageWriter:
        return GoogleStorageWriter(write_client(self), self)


_clients: dict[tuple[StorageWriteSettings, int], Any] = {}
_clients_lock = threading.Lock()


def write_client(settings: StorageWriteSettings) -> Any:
    """The process's ``BigQueryWriteClient`` for ``settings`` (one gRPC channel), built on
    first use; a forked child builds its own (a gRPC channel does not survive a fork)."""
    key = (settings, os.getpid())
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _new_client(settings)
        return client


def _new_client(settings: StorageWriteSettings) -> Any:
    from google.cloud import bigquery_storage_v1

    if settings.grpc_endpoint is None:
        from kbqe_dagster.resources.gcp_credentials import credentials_from_base64

        return bigquery_storage_v1.BigQueryWriteClient(
            credentials=credentials_from_base64(settings.gcp_credentials)
        )
    import grpc
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    channel = grpc.insecure_channel(settings.grpc_endpoint)
    return bigquery_storage_v1.BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(channel=channel)
    )


class GoogleStorageWriter:
    """:class:`StorageWriter` over ``BigQueryWriteClient`` (module docstring)."""

    def __init__(self, client: Any, settings: StorageWriteSettings) -> None:
        self.client = client
        self.settings = settings
        # stream → (its AppendRows connection, the serialized writer schema it was opened with)
        self._connections: dict[str, tuple[Any, bytes]] = {}
        self._lock = threading.Lock()

    # --- streams ---------------------------------------------------------------------------
    def _table_path(self, dataset: str, table: str) -> str:
        return f"projects/{self.settings.project}/datasets/{dataset}/tables/{table}"

    def create_stream(self, dataset: str, table: str, kind: str = "committed") -> str:
        from google.api_core import exceptions
        from google.cloud.bigquery_storage_v1 import types

        kinds = {
            "committed": types.WriteStream.Type.COMMITTED,
            "pending": types.WriteStream.Type.PENDING,
        }
        if kind not in kinds:
            raise ValueError(f"stream kind {kind!r}: expected one of {sorted(kinds)}")
        try:
            stream = self.client.create_write_stream(
                parent=self._table_path(dataset, table),
                write_stream=types.WriteStream(type_=kinds[kind]),
                retry=_retry(self.settings.append_timeout_s),
            )
        except exceptions.GoogleAPICallError as exc:
            raise StorageWriteError(
                f"{dataset}.{table}: CreateWriteStream ({kind}) failed: {_status(exc)}"
            ) from exc
        return stream.name

    def stream_state(self, stream: str) -> StreamState | None:
        from google.api_core import exceptions

        try:
            info = self.client.get_write_stream(name=stream, retry=_retry(30.0))
        except exceptions.NotFound:
            return None
        except exceptions.GoogleAPICallError as exc:
            raise StorageWriteError(
                f"{_table_of(stream)}: GetWriteStream of stream {stream} failed: {_status(exc)}"
            ) from exc
        return StreamState(
            name=info.name,
            kind=info.type_.name.lower(),
            create_time=_time(info, "create_time"),
            commit_time=_time(info, "commit_time"),
        )

    def finalize(self, stream: str) -> int:
        from google.api_core import exceptions

        self._drop_connection(stream)
        try:
            answer = self.client.finalize_write_stream(name=stream, retry=_retry(60.0))
        except exceptions.NotFound as exc:
            raise WriteStreamNotFoundError(
                f"{_table_of(stream)}: stream {stream} does not exist (any more); not finalized"
            ) from exc
        except exceptions.GoogleAPICallError as exc:
            raise StorageWriteError(
                f"{_table_of(stream)}: FinalizeWriteStream of stream {stream} failed: "
                f"{_status(exc)}"
            ) from exc
        return int(answer.row_count)

    def commit(self, dataset: str, table: str, streams: Sequence[str]) -> None:
        from google.api_core import exceptions
        from google.cloud.bigquery_storage_v1 import types

        request = types.BatchCommitWriteStreamsRequest(
            parent=self._table_path(dataset, table), write_streams=list(streams)
        )
        try:
            answer = self.client.batch_commit_write_streams(request=request, retry=_retry(60.0))
        except exceptions.GoogleAPICallError as exc:
            raise StorageWriteError(
                f"{dataset}.{table}: BatchCommitWriteStreams of {list(streams)} failed: "
                f"{_status(exc)}"
            ) from exc
        if answer.stream_errors:
            errors = "; ".join(
                f"{e.entity}: {e.code.name} {e.error_message}" for e in answer.stream_errors
            )
            raise StorageWriteError(
                f"{dataset}.{table}: BatchCommitWriteStreams committed nothing: {errors}"
            )

    # --- appends ---------------------------------------------------------------------------
    def append(self, stream: str, rows: ProtoRows, offset: int | None) -> AppendOutcome:
        from google.api_core import exceptions
        from google.cloud.bigquery_storage_v1 import exceptions as bqstorage_exceptions

        request = self._request(stream, rows, offset)
        schema = rows.descriptor.SerializeToString()

        def once() -> AppendOutcome:
            connection = self._connection(stream, rows, schema)
            try:
                response = connection.send(request).result(
                    timeout=self.settings.append_timeout_s,
                    polling=_answer_polling(self.settings.append_timeout_s),
                )
            except exceptions.GoogleAPICallError as exc:
                outcome = _outcome_of_error(exc)
                if outcome is not None:
                    return outcome
                self._drop_connection(stream)
                # The client library reports a connection the server refused to open as
                # UNKNOWN, hiding NOT_FOUND: ask whether the stream still exists.
                if isinstance(exc, exceptions.NotFound) or (
                    isinstance(exc, exceptions.Unknown) and self.stream_state(stream) is None
                ):
                    raise WriteStreamNotFoundError(
                        f"{_table_of(stream)}: stream {stream} does not exist (any more); "
                        f"AppendRows of {len(rows.rows)} rows at offset {offset} not written"
                    ) from exc
                raise
            except bqstorage_exceptions.StreamClosedError:
                self._drop_connection(stream)
                raise
            return _outcome_of_response(response)

        try:
            if offset is None:
                return once()
            return _retry(self.settings.append_timeout_s)(once)()
        except (
            exceptions.GoogleAPICallError,
            exceptions.RetryError,
            bqstorage_exceptions.StreamClosedError,
        ) as exc:
            raise StorageWriteError(
                f"{_table_of(stream)}: AppendRows of {len(rows.rows)} rows at offset {offset} "
                f"to stream {stream} failed: {_status(exc)}"
            ) from exc

    @staticmethod
    def _request(stream: str, rows: ProtoRows, offset: int | None) -> Any:
        from google.cloud.bigquery_storage_v1 import types

        request = types.AppendRowsRequest(write_stream=stream)
        # The rows go straight into the underlying protobuf message: proto-plus's
        # constructor marshals a repeated field item by item (~1 us a row, 10 ms a request).
        types.AppendRowsRequest.pb(request).proto_rows.rows.serialized_rows.extend(rows.rows)
        if offset is not None:
            request.offset = offset  # an Int64Value: set means "check the offset"
        return request

    def _connection(self, stream: str, rows: ProtoRows, schema: bytes) -> Any:
        from google.cloud.bigquery_storage_v1 import types, writer

        with self._lock:
            current = self._connections.get(stream)
            if current is not None and current[1] == schema:
                return current[0]
        if current is not None:
            self._drop_connection(stream)  # a new writer schema: a new connection carries it
        template = types.AppendRowsRequest(
            write_stream=stream,
            proto_rows=types.AppendRowsRequest.ProtoData(
                writer_schema=types.ProtoSchema(proto_descriptor=rows.descriptor)
            ),
        )
        connection = writer.AppendRowsStream(self.client, template)
        with self._lock:
            self._connections[stream] = (connection, schema)
        return connection

    def release(self, stream: str) -> None:
        self._drop_connection(stream)

    def _drop_connection(self, stream: str) -> None:
        with self._lock:
            current = self._connections.pop(stream, None)
        if current is not None:
            _close_quietly(current[0])

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection, _ in connections:
            _close_quietly(connection)


# --- answers ---------------------------------------------------------------------------------
def _outcome_of_response(response: Any) -> AppendOutcome:
    if response.row_errors:
        return _refused(response)
    result = response.append_result
    offset = result.offset if "offset" in result else None
    return AppendOutcome(APPENDED, offset=int(offset) if offset is not None else None)


def _outcome_of_error(exc: Any) -> AppendOutcome | None:
    """The outcome an error response stands for, or None (an error to raise or retry)."""
    code = _grpc_code(exc)
    message = getattr(exc, "message", "") or str(exc)
    if code == _GRPC_ALREADY_EXISTS:
        return AppendOutcome(ALREADY_EXISTS, message)
    if code == _GRPC_OUT_OF_RANGE:
        return AppendOutcome(OUT_OF_RANGE, message)
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "row_errors", None):
        return _refused(response)
    return None


def _refused(response: Any) -> AppendOutcome:
    errors = tuple((int(e.index), f"{e.code.name}: {e.message}") for e in response.row_errors)
    return AppendOutcome(ROWS_REFUSED, response.error.message, errors)


def _grpc_code(exc: Any) -> int | None:
    code = getattr(exc, "grpc_status_code", None)
    if code is None:
        return None
    value = getattr(code, "value", code)
    return int(value[0] if isinstance(value, tuple) else value)


def _retryable(exc: BaseException) -> bool:
    from google.api_core import exceptions
    from google.cloud.bigquery_storage_v1 import exceptions as bqstorage_exceptions

    return isinstance(
        exc,
        (
            exceptions.ServiceUnavailable,
            exceptions.InternalServerError,
            exceptions.Aborted,
            exceptions.DeadlineExceeded,
            exceptions.Unknown,
            bqstorage_exceptions.StreamClosedError,
        ),
    )


def _retry(deadline_s: float) -> Any:
    from google.api_core import retry

    return retry.Retry(
        predicate=_retryable, initial=0.2, maximum=5.0, multiplier=2.0, timeout=deadline_s
    )


ANSWER_POLL_MAX_S = 0.02
"""The longest an append sleeps between two looks at its answer."""


def _answer_polling(deadline_s: float) -> Any:
    """How an append waits for its answer. The library's ``AppendRowsFuture`` is a
    ``PollingFuture``: its ``result()`` sleeps between looks as api_core's long-running
    operations do (up to 1 s, then up to 1.5 s, 2.25 s, ... to 20 s), though the answer is set
    by the connection's own thread the moment it arrives. Every append of a range waited about
    a second for an answer the emulator gave in tens of milliseconds, which capped a stage
    loop's rounds (docs/operations.md, "Latency benchmark"). Looks every 1 ms doubling to
    :data:`ANSWER_POLL_MAX_S` cost nothing next to the request and add at most that to it."""
    from google.api_core import retry
    from google.api_core.future import polling

    return retry.Retry(
        predicate=polling.POLLING_PREDICATE,
        initial=0.001,
        maximum=ANSWER_POLL_MAX_S,
        multiplier=2.0,
        timeout=deadline_s,
    )


def _status(exc: BaseException) -> str:
    """The gRPC status name (else the exception's type) and the API's message."""
    code = getattr(exc, "grpc_status_code", None)
    name = getattr(code, "name", None) or type(exc).__name__
    return f"{name}: {getattr(exc, 'message', '') or exc}"


def _table_of(stream: str) -> str:
    """``dataset.table`` of a stream name ``projects/p/datasets/d/tables/t/streams/s``."""
    parts = stream.split("/")
    if len(parts) >= 6 and parts[2] == "datasets" and parts[4] == "tables":
        return f"{parts[3]}.{parts[5]}"
    return stream


def _time(info: Any, name: str) -> dt.datetime | None:
    if name not in info:  # proto-plus: presence of a message field
        return None
    value = getattr(info, name)
    return value if isinstance(value, dt.datetime) else None


def _close_quietly(connection: Any) -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - an already closed connection is what we want
        log.debug("closing an AppendRows connection", exc_info=True)
