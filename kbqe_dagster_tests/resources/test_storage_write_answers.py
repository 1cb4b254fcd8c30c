"""How the Storage Write client reads BigQuery's answers, for the answers the local emulator
never gives (pinned in test_storage_write_on_local_stack.py): row errors on a refused request,
transport errors retried at the same offset, an error that is neither. A fake at the client
boundary: the connection's ``send`` answers what BigQuery answers, as the client library
delivers it (a response, or the exception ``from_grpc_status`` builds of an error response).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.bigquery_storage_v1 import types
from google.cloud.bigquery_storage_v1.writer import AppendRowsFuture
from google.rpc import status_pb2

from kbqe_dagster.core.errors import StorageWriteError, WriteStreamNotFoundError
from kbqe_dagster.core.formats.avro_proto import proto_rows
from kbqe_dagster.resources.bigquery.storage_write import (
    ANSWER_POLL_MAX_S,
    AppendOutcome,
    GoogleStorageWriter,
    StorageWriteSettings,
    write_client,
)

STREAM = "projects/p/datasets/sales/tables/orders/streams/0123456789abcdef"
SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
ROWS = proto_rows(SCHEMA, [{"n": 1}, {"n": 2}, {"n": 3}])


def error_response(code: int, message: str, row_errors=()) -> types.AppendRowsResponse:
    return types.AppendRowsResponse(
        error=status_pb2.Status(code=code, message=message),
        row_errors=[
            types.RowError(index=i, code=types.RowError.RowErrorCode.FIELDS_ERROR, message=m)
            for i, m in row_errors
        ],
    )


def as_library_delivers(response: types.AppendRowsResponse) -> Any:
    """What ``AppendRowsFuture.result()`` returns or raises for a response."""
    if response.error.code:
        return exceptions.from_grpc_status(
            response.error.code, response.error.message, response=response
        )
    return response


class FakeConnection:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[Any] = []

    def send(self, request: Any) -> AppendRowsFuture:
        self.sent.append(request)
        future = AppendRowsFuture(manager=None)  # what the library's connection returns
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
        return future

    def close(self) -> None:
        pass


class FakeClient:
    def __init__(self, stream_exists: bool = True) -> None:
        self.stream_exists = stream_exists

    def get_write_stream(self, name: str, retry: Any = None) -> types.WriteStream:
        if not self.stream_exists:
            raise exceptions.NotFound(f"Requested entity was not found. Entity: {name}")
        return types.WriteStream(name=name, type_=types.WriteStream.Type.COMMITTED)


def writer_answering(
    *answers: Any, stream_exists: bool = True
) -> tuple[GoogleStorageWriter, FakeConnection]:
    settings = StorageWriteSettings(project="p", append_timeout_s=5.0)
    writer = GoogleStorageWriter(FakeClient(stream_exists), settings)
    connection = FakeConnection(
        [as_library_delivers(a) if isinstance(a, types.AppendRowsResponse) else a for a in answers]
    )
    writer._connection = lambda stream, rows, schema: connection  # type: ignore[method-assign]
    return writer, connection


def ok(offset: int) -> types.AppendRowsResponse:
    return types.AppendRowsResponse(
        append_result=types.AppendRowsResponse.AppendResult(offset=offset)
    )


def test_an_append_result_is_appended_at_the_offset_the_api_names() -> None:
    writer, connection = writer_answering(ok(7))
    assert writer.append(STREAM, ROWS, offset=7) == AppendOutcome("appended", offset=7)
    (request,) = connection.sent
    assert request.offset == 7 and "offset" in request
    assert list(request.proto_rows.rows.serialized_rows) == list(ROWS.rows)


def test_no_offset_sends_none_and_the_api_names_none() -> None:
    writer, connection = writer_answering(
        types.AppendRowsResponse(append_result=types.AppendRowsResponse.AppendResult())
    )
    assert writer.append(STREAM, ROWS, offset=None) == AppendOutcome("appended")
    assert "offset" not in connection.sent[0]


@pytest.mark.parametrize(("code", "kind"), [(6, "already_exists"), (11, "out_of_range")])
def test_offset_answers_are_outcomes_with_the_apis_text(code, kind) -> None:
    writer, _ = writer_answering(error_response(code, "Offset 3 ... next expected 5"))
    assert writer.append(STREAM, ROWS, offset=3) == AppendOutcome(
        kind, "Offset 3 ... next expected 5"
    )


def test_row_errors_are_rows_refused_with_each_rows_index_and_reason() -> None:
    """BigQuery answers INVALID_ARGUMENT with ``row_errors`` and writes none of the
    request's rows."""
    writer, _ = writer_answering(
        error_response(
            3,
            "Errors found while processing rows.",
            [(0, "Field n: Required field is missing"), (2, "Field n: out of range")],
        )
    )
    assert writer.append(STREAM, ROWS, offset=0) == AppendOutcome(
        "rows_refused",
        "Errors found while processing rows.",
        (
            (0, "FIELDS_ERROR: Field n: Required field is missing"),
            (2, "FIELDS_ERROR: Field n: out of range"),
        ),
    )


def test_invalid_argument_without_row_errors_raises_naming_table_stream_and_status() -> None:
    writer, _ = writer_answering(error_response(3, "Input schema has more fields"))
    with pytest.raises(
        StorageWriteError,
        match=r"sales\.orders: AppendRows of 3 rows at offset 4 to stream "
        r".*0123456789abcdef failed: INVALID_ARGUMENT: Input schema",
    ):
        writer.append(STREAM, ROWS, offset=4)


@pytest.mark.parametrize(
    "transient",
    [
        exceptions.ServiceUnavailable("connection reset"),
        exceptions.InternalServerError("internal"),
        exceptions.Aborted("aborted"),
    ],
)
def test_a_transport_error_is_retried_at_the_same_offset(transient) -> None:
    writer, connection = writer_answering(transient, ok(4))
    assert writer.append(STREAM, ROWS, offset=4) == AppendOutcome("appended", offset=4)
    assert [r.offset for r in connection.sent] == [4, 4]


def test_a_retry_of_an_append_that_landed_answers_already_exists() -> None:
    writer, _ = writer_answering(
        exceptions.ServiceUnavailable("reset after the write"),
        error_response(6, "Offset 4 already committed"),
    )
    assert writer.append(STREAM, ROWS, offset=4).kind == "already_exists"


def test_an_append_without_offset_is_not_retried() -> None:
    """Nothing would tell a retry of a request that landed from one that did not."""
    writer, connection = writer_answering(exceptions.ServiceUnavailable("reset"), ok(0))
    with pytest.raises(StorageWriteError, match="ServiceUnavailable|UNAVAILABLE"):
        writer.append(STREAM, ROWS, offset=None)
    assert len(connection.sent) == 1


def test_a_quota_answer_is_not_retried_here_but_raised() -> None:
    writer, connection = writer_answering(exceptions.ResourceExhausted("quota"), ok(0))
    with pytest.raises(StorageWriteError, match="RESOURCE_EXHAUSTED"):
        writer.append(STREAM, ROWS, offset=0)
    assert len(connection.sent) == 1


def test_a_connection_refused_for_a_stream_that_is_gone_raises_not_found() -> None:
    """The client library reports a connection the server refused to open as UNKNOWN."""
    writer, _ = writer_answering(
        exceptions.Unknown("There was a problem opening the stream"), stream_exists=False
    )
    with pytest.raises(WriteStreamNotFoundError, match=r"sales\.orders: stream .* not written"):
        writer.append(STREAM, ROWS, offset=0)


def test_settings_pickle_and_one_client_serves_a_process() -> None:
    settings = StorageWriteSettings(project="p", grpc_endpoint="127.0.0.1:1")
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert write_client(settings) is write_client(StorageWriteSettings("p", "127.0.0.1:1"))
    assert write_client(settings) is not write_client(StorageWriteSettings("p", "127.0.0.1:2"))


def test_an_append_looks_for_its_answer_every_few_milliseconds(monkeypatch) -> None:
    """The library's future sleeps up to 1 s, then 1.5 s, ... between looks at an answer its
    own thread sets the moment it arrives: every append would wait about a second. The
    writer's append looks every 1 ms, doubling to at most ``ANSWER_POLL_MAX_S``."""
    from google.api_core.retry import retry_unary

    pending = AppendRowsFuture(manager=None)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the answer arrives while the append sleeps
        sleeps.append(seconds)
        if len(sleeps) == 8:
            pending.set_result(ok(0))

    monkeypatch.setattr(retry_unary.time, "sleep", sleep)
    writer, connection = writer_answering()
    connection.send = lambda request: pending  # type: ignore[method-assign]
    assert writer.append(STREAM, ROWS, offset=0) == AppendOutcome("appended", offset=0)
    assert len(sleeps) == 8
    assert max(sleeps) <= ANSWER_POLL_MAX_S
