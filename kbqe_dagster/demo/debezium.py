"""Realistic Debezium data (for the keyed tests and the fault suite), how to produce it, and
the oracle that says what BigQuery must hold after it.

The schemas follow Debezium's Avro layout for a Postgres table (the ``Envelope`` with
``before``/``after`` of the row's ``Value`` record, ``source`` with ``ts_ms``, ``db``,
``table``, ``lsn``, ..., ``op``, ``ts_ms``, ``transaction``); the Kafka key is the ``Key``
record of the primary key. Keys and values are framed through the schema registry as
Debezium's Avro converter writes them, and a key's changes stay in one partition.

:class:`CustomersTable` plays the database: each call produces one kind of change and keeps
the table's state, so the generated stream holds snapshot reads, inserts, updates, deletes
each followed by a tombstone, keys re-created after their delete (also in the same
millisecond), redelivered duplicates, out-of-order versions and, from schema v2 on, a column
added mid-stream. The oracle computes ``D.T`` and ``D.T_history`` from the produced events by
the rule of core/keyed/contract.py, independently of the SQL under test.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import random
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.demo.debezium_changes import PRECISE_TS, Change, value_record

ROW_V1 = [
    {"name": "id", "type": "int"},
    {"name": "first_name", "type": "string"},
    {"name": "last_name", "type": "string"},
    {"name": "email", "type": "string"},
]
ROW_V2 = ROW_V1 + [{"name": "phone", "type": ["null", "string"], "default": None}]
ROW_COLUMNS = ("id", "first_name", "last_name", "email", "phone")
END_OF_TIME = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def envelope_schema(namespace: str, row_fields: list[dict], ts_precision: bool = False) -> dict:
    """``ts_precision``: the envelope of Debezium 2.6 on, which adds ``ts_us`` and ``ts_ns``
    after ``ts_ms`` (a connector upgraded mid-stream: a new value schema, the same row)."""
    value = {
        "type": "record",
        "name": "Value",
        "fields": row_fields,
        "connect.name": f"{namespace}.Value",
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {
                "name": "snapshot",
                "type": [
                    {
                        "type": "string",
                        "connect.version": 1,
                        "connect.parameters": {"allowed": "true,last,false,incremental"},
                        "connect.default": "false",
                        "connect.name": "io.debezium.data.Enum",
                    },
                    "null",
                ],
                "default": "false",
            },
            {"name": "db", "type": "string"},
            {"name": "sequence", "type": ["null", "string"], "default": None},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": None},
            {"name": "lsn", "type": ["null", "long"], "default": None},
            {"name": "xmin", "type": ["null", "long"], "default": None},
        ],
        "connect.name": "io.debezium.connector.postgresql.Source",
    }
    block = {
        "type": "record",
        "name": "block",
        "namespace": "event",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"},
        ],
        "connect.version": 1,
        "connect.name": "event.block",
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            *(
                [{"name": n, "type": ["null", "long"], "default": None} for n in PRECISE_TS]
                if ts_precision
                else []
            ),
            {"name": "transaction", "type": ["null", block], "default": None},
        ],
        "connect.name": f"{namespace}.Envelope",
    }


def key_schema(namespace: str) -> dict:
    return {
        "type": "record",
        "name": "Key",
        "namespace": namespace,
        "fields": [{"name": "id", "type": "int"}],
        "connect.name": f"{namespace}.Key",
    }


def frame(schema_id: int, schema: dict, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


@dataclass
class CustomersTable:
    """The source table: its rows, its clock, and every change it emitted (in order)."""

    seed: int
    partitions: int = 3
    rows: dict[int, dict] = field(default_factory=dict)
    clock_ms: int = 1_732_000_000_000  # 2024-11-19
    changes: list[Change] = field(default_factory=list)
    schema_version: int = 1
    next_id: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _tick(self) -> int:
        self.clock_ms += self.rng.randint(1, 50)
        return self.clock_ms

    def _row(self, id_: int) -> dict:
        row = {
            "id": id_,
            "first_name": self.rng.choice(["Sally", "George", "Edward", "Anne"]),
            "last_name": self.rng.choice(["Thomas", "Bailey", "Walker", "Kretchmar"]),
            "email": f"u{id_}.{self.rng.randint(0, 10**6)}@example.com",
        }
        if self.schema_version >= 2:
            row["phone"] = self.rng.choice([None, f"+1-555-{self.rng.randint(1000, 9999)}"])
        return row

    def _emit(self, change: Change) -> Change:
        self.changes.append(change)
        return change

    def snapshot(self, count: int) -> None:
        ts = self._tick()
        for _ in range(count):
            row = self._row(self.next_id)
            self.next_id += 1
            self.rows[row["id"]] = row
            self._emit(Change(row["id"], "r", None, row, ts, self.schema_version))

    def insert(self, ts: int | None = None, id_: int | None = None) -> None:
        if id_ is None:
            id_, self.next_id = self.next_id, self.next_id + 1
        row = self._row(id_)
        self.rows[id_] = row
        self._emit(Change(id_, "c", None, row, ts or self._tick(), self.schema_version))

    def update(self) -> None:
        id_ = self.rng.choice(sorted(self.rows))
        before = self.rows[id_]
        after = {**self._row(id_), "first_name": before["first_name"]}
        self.rows[id_] = after
        self._emit(Change(id_, "u", before, after, self._tick(), self.schema_version))

    def delete(self, recreate_same_ms: bool = False) -> None:
        id_ = self.rng.choice(sorted(self.rows))
        before = self.rows.pop(id_)
        ts = self._tick()
        self._emit(Change(id_, "d", before, None, ts, self.schema_version))
        self._emit(Change(id_, None, ts_ms=ts))  # the tombstone
        if recreate_same_ms:
            self.insert(ts=ts, id_=id_)

    def redeliver(self, count: int) -> None:
        """Earlier events again, as a restarted connector re-sends them (tombstones too)."""
        for change in self.rng.sample(self.changes[-20:], count):
            self._emit(change)

    def late_version(self) -> None:
        """An update whose version is older than the key's current one (out of order)."""
        id_ = self.rng.choice(sorted(self.rows))
        latest = max(c.ts_ms for c in self.changes if c.id == id_ and not c.is_tombstone)
        stale = {**self._row(id_)}
        self._emit(Change(id_, "u", self.rows[id_], stale, latest - 7, self.schema_version))

    def round(self, inserts: int, updates: int, deletes: int) -> None:
        for _ in range(inserts):
            self.insert()
        for _ in range(updates):
            self.update()
        for index in range(deletes):
            self.delete(recreate_same_ms=index == 0)
        self.late_version()
        self.redeliver(3)


@dataclass(frozen=True)
class Produced:
    change: Change
    partition: int
    offset: int


class DebeziumTopics:
    """Topics fed the same changes, as Debezium's Avro converter writes them: key and value
    framed through the registry (subjects ``<topic>-key``, ``<topic>-value``), a key's changes
    in one partition; remembers where each message landed, for the oracle. With
    ``encoding="json"``, as Kafka Connect's JsonConverter writes them instead (schema embedded
    in each key and value, nothing registered: kbqe_dagster/demo/debezium_json.py)."""

    def __init__(
        self,
        bootstrap: str,
        registry_url: str,
        topics: list[str],
        partitions: int = 3,
        namespace: str = "dbserver1.inventory.customers",
        encoding: str = "avro",
    ) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.bootstrap, self.topics, self.partitions = bootstrap, topics, partitions
        self.namespace = namespace
        self.log = logging.getLogger("kbqe_dagster.kafka")
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": self.log})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
        )
        for future in futures.values():
            future.result(30)
        self.registry = SchemaRegistryClient({"url": registry_url})
        self.produced: dict[str, list[Produced]] = {t: [] for t in topics}
        self.sent = 0
        self.encoding = encoding

    def _register(self, subject: str, schema: dict) -> int:
        from confluent_kafka.schema_registry import Schema

        return self.registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))

    def produce(
        self, table: CustomersTable, ts_precision: bool = False, deliver_within: float = 30.0
    ) -> int:
        """Send the table's changes not sent yet to every topic; returns their count.
        ``ts_precision``: under the envelope with ``ts_us``/``ts_ns`` (:func:`envelope_schema`).
        ``deliver_within``: seconds to wait for every delivery (the soak restarts the broker on
        purpose and waits it out, as a real producer does)."""
        from confluent_kafka import Producer

        rows = ROW_V2 if table.schema_version >= 2 else ROW_V1
        new = table.changes[self.sent :]
        for topic in self.topics:
            encode = (
                self._json_encoder(ts_precision)
                if self.encoding == "json"
                else self._avro_encoder(topic, rows, ts_precision)
            )
            producer = Producer({"bootstrap.servers": self.bootstrap, "logger": self.log})
            delivered: list[Produced] = []
            errors: list[str] = []
            for change in new:

                def done(err, msg, change=change, errors=errors, delivered=delivered):
                    if err is not None:
                        errors.append(str(err))
                    else:
                        delivered.append(Produced(change, msg.partition(), msg.offset()))

                key, value = encode(change)
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=change.id % self.partitions,
                    on_delivery=done,
                )
                producer.poll(0)
            if producer.flush(deliver_within) or errors:
                raise RuntimeError(f"{topic}: produce failed: {errors[:3]}")
            self.produced[topic] += delivered
        self.sent = len(table.changes)
        return len(new)

    def _avro_encoder(self, topic: str, rows: list[dict], ts_precision: bool) -> Any:
        value_schema = envelope_schema(self.namespace, rows, ts_precision)
        value_id = self._register(f"{topic}-value", value_schema)
        key = key_schema(self.namespace)
        key_id = self._register(f"{topic}-key", key)

        def encode(change: Change) -> tuple[bytes, bytes | None]:
            value = (
                None
                if change.is_tombstone
                else frame(value_id, value_schema, value_record(change, self.namespace))
            )
            return frame(key_id, key, {"id": change.id}), value

        return encode

    def _json_encoder(self, ts_precision: bool) -> Any:
        from kbqe_dagster.demo.debezium_json import json_key, json_value

        def encode(change: Change) -> tuple[bytes, bytes | None]:
            value = (
                None if change.is_tombstone else json_value(change, self.namespace, ts_precision)
            )
            return json_key(change, self.namespace), value

        return encode

    def delete(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": self.log})
        for future in admin.delete_topics(self.topics).values():
            try:
                future.result(30)
            except Exception:  # noqa: BLE001 - cleanup is best effort
                pass


# --- the oracle --------------------------------------------------------------------------------
def _order(p: Produced) -> tuple[int, int, int]:
    return (p.change.ts_ms, p.partition, p.offset)


def _row_values(change: Change) -> tuple:
    row = change.row
    return tuple(row.get(c) for c in ROW_COLUMNS)


MASK_ENV = "KBQE_KEYED_MASK_KEY"
"""The environment variable of :data:`CUSTOMER_TRANSFORMS`' HMAC key."""
CUSTOMER_TRANSFORMS = [
    {"rename": "id", "to": "customer_id"},
    {"cast": "customer_id", "to": "string"},
    {"mask": "email", "key_env": MASK_ENV},
    {"drop": "last_name"},
    {"add": "source_db", "value": "inventory"},
    {"compute": "greeting", "expression": '"Hi " + first_name', "type": "string"},
]
"""Transforms of a keyed topic a CDC user writes: the key renamed and cast to text, the
e-mail masked, a column dropped, a constant and a computed column added."""
TRANSFORMED_COLUMNS = ("customer_id", "first_name", "email", "phone", "source_db", "greeting")
KERNEL_TRANSFORMS = [
    {"cast": "id", "to": "string"},
    {"rename": "id", "to": "customer_id"},
    {"mask": "email", "key_env": MASK_ENV},
    {"drop": "last_name"},
    {"add": "source_db", "value": "inventory"},
]
"""The same without the computed column, the cast before the rename: transforms the native
kernel does inside the row (core/transforms/kernel_transforms.py), where the compute and the
cast of a renamed field leave :data:`CUSTOMER_TRANSFORMS` to the Python path."""
KERNEL_TRANSFORMED_COLUMNS = TRANSFORMED_COLUMNS[:-1]


def transformed_values(mask_key: bytes) -> Callable[[Change], tuple]:
    """The oracle's own :data:`CUSTOMER_TRANSFORMS` (never the code under test): a change's
    row (``after``, or a delete's ``before``) as :data:`TRANSFORMED_COLUMNS` values."""

    def values(change: Change) -> tuple:
        row = change.row
        return (
            str(row["id"]),
            row["first_name"],
            hmac.new(mask_key, row["email"].encode(), "sha256").hexdigest(),
            row.get("phone"),
            "inventory",
            "Hi " + row["first_name"],
        )

    return values


def kernel_transformed_values(mask_key: bytes) -> Callable[[Change], tuple]:
    """The oracle's own :data:`KERNEL_TRANSFORMS`, as :func:`transformed_values`."""
    full = transformed_values(mask_key)
    return lambda change: full(change)[:-1]


def current_state(
    produced: list[Produced], hard: bool, row_values: Callable[[Change], tuple] | None = None
) -> set[tuple]:
    """``D.T`` as rows ``(*ROW_COLUMNS, _op, _source_ts_ms, _deleted, partition, offset)``
    (``row_values``: the row's values when they are not :data:`ROW_COLUMNS`')."""
    row_values = row_values or _row_values
    winners: dict[int, Produced] = {}
    for p in produced:
        if p.change.is_tombstone:
            continue
        best = winners.get(p.change.id)
        if best is None or _order(p) > _order(best):
            winners[p.change.id] = p
    return {
        (
            *row_values(p.change),
            p.change.op,
            p.change.ts_ms,
            p.change.op == "d",
            p.partition,
            p.offset,
        )
        for p in winners.values()
        if not (hard and p.change.op == "d")
    }


def history(
    produced: list[Produced], row_values: Callable[[Change], tuple] | None = None
) -> set[tuple]:
    """``D.T_history`` as rows ``(*ROW_COLUMNS, _op, _deleted, _valid_from, _valid_to,
    _is_current)``."""
    row_values = row_values or _row_values
    versions: dict[tuple[int, int], Produced] = {}
    for p in produced:
        if p.change.is_tombstone:
            continue
        slot = (p.change.id, p.change.ts_ms)
        if slot not in versions or _order(p) > _order(versions[slot]):
            versions[slot] = p
    by_key: dict[int, list[Produced]] = {}
    for (id_, _), p in sorted(versions.items()):
        by_key.setdefault(id_, []).append(p)
    rows = set()
    for chain in by_key.values():
        for i, p in enumerate(chain):
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            valid_to = _ts(nxt.change.ts_ms) if nxt else END_OF_TIME
            rows.add(
                (
                    *row_values(p.change),
                    p.change.op,
                    p.change.op == "d",
                    _ts(p.change.ts_ms),
                    valid_to,
                    nxt is None,
                )
            )
    return rows


def _ts(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


# --- a run's own corner of the local stack ---------------------------------------------------------
MODES = ("soft", "hard")


@dataclass
class KeyedRig:
    """Two Debezium topics of one run, fed the same changes into ``customers_soft`` and
    ``customers_hard`` (history on, key from the Kafka key's schema), with the pipeline file,
    staging prefix, dataset and Dagster instance ``kbqe run --until-idle`` needs; and the
    comparison of both tables with the oracle. For the keyed tests and the fault suite."""

    run: str
    topics: DebeziumTopics
    by_mode: dict[str, str]
    dataset: str
    env: dict[str, str]
    client: Any
    kbqe: str
    transformed: tuple[str, ...] = ()
    """The modes whose topic has :data:`CUSTOMER_TRANSFORMS` (their tables hold
    :data:`TRANSFORMED_COLUMNS`)."""
    kernel_transformed: tuple[str, ...] = ()
    """The modes whose topic has :data:`KERNEL_TRANSFORMS` (:data:`KERNEL_TRANSFORMED_COLUMNS`)."""

    @classmethod
    def create(
        cls,
        endpoints: Any,
        workdir: Path,
        *,
        partitions: int = 3,
        range_size: int = 40,
        delivery: str | None = None,
        encoding: str = "avro",
        transformed: tuple[str, ...] = (),
        kernel_transformed: tuple[str, ...] = (),
    ) -> KeyedRig:
        """``delivery``: both changelogs' ``delivery:`` (``load``, ``storage_write``;
        None: the default, load). ``encoding``: the converter the topics are written by
        (``avro``, ``json``: :class:`DebeziumTopics`). ``transformed``: the modes whose
        topic has :data:`CUSTOMER_TRANSFORMS`; ``kernel_transformed``, :data:`KERNEL_TRANSFORMS`."""
        import os
        import shutil
        import sys
        import uuid

        import yaml

        from kbqe_dagster.localstack.clients import local_bigquery_client
        from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
        from kbqe_dagster.packaged import data_file

        run = uuid.uuid4().hex[:8]
        by_mode = {mode: f"dbserver1.inventory.customers{run}{mode}" for mode in MODES}
        topics = DebeziumTopics(
            endpoints.kafka_bootstrap,
            endpoints.registry_url,
            list(by_mode.values()),
            partitions,
            encoding=encoding,
        )
        dataset = f"inventory_{run}"
        workdir.mkdir(parents=True, exist_ok=True)
        pipeline = workdir / f"keyed-{run}.yaml"
        pipeline.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "topics": [
                        {
                            "name": by_mode[mode],
                            "format": "debezium",
                            "routing": {
                                "mode": "static",
                                "dataset": dataset,
                                "table": f"customers_{mode}",
                            },
                            "keyed": {"deletes": mode, "history": True},
                            **({"delivery": delivery} if delivery else {}),
                            **({"transforms": CUSTOMER_TRANSFORMS} if mode in transformed else {}),
                            **(
                                {"transforms": KERNEL_TRANSFORMS}
                                if mode in kernel_transformed
                                else {}
                            ),
                        }
                        for mode in MODES
                    ],
                    "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
                    "staging": {"max_messages_per_range": range_size},
                }
            )
        )
        home = workdir / f"dagster_home-{run}"
        home.mkdir()
        shutil.copyfile(data_file("dagster.yaml"), home / "dagster.yaml")
        env = {
            **os.environ,
            "KBQE_ENV": "local",
            "KBQE_PIPELINE_CONFIG": str(pipeline),
            "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/keyed-{run}",
            "DAGSTER_HOME": str(home),
            MASK_ENV: f"mask-key-{run}",
        }
        env.pop("KBQE_CRASH_AT", None)
        kbqe = str(Path(sys.executable).parent / "kbqe")
        client = local_bigquery_client()
        return cls(run, topics, by_mode, dataset, env, client, kbqe, tuple(transformed),
                   tuple(kernel_transformed))  # fmt: skip

    def produced(self, mode: str) -> list[Produced]:
        return self.topics.produced[self.by_mode[mode]]

    def run_until_idle(self, crash_at: str | None = None, timeout: float = 900):
        """``kbqe run --until-idle --json`` in a child process (``crash_at``: a
        ``KBQE_CRASH_AT`` spec, kbqe_dagster/faults.py)."""
        import subprocess

        env = {**self.env, **({"KBQE_CRASH_AT": crash_at} if crash_at else {})}
        return subprocess.run(
            [self.kbqe, "run", "--until-idle", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def columns(self, mode: str) -> tuple[str, ...]:
        """The row columns of ``mode``'s tables."""
        if mode in self.kernel_transformed:
            return KERNEL_TRANSFORMED_COLUMNS
        return TRANSFORMED_COLUMNS if mode in self.transformed else ROW_COLUMNS

    def row_values(self, mode: str) -> Callable[[Change], tuple] | None:
        """The oracle's row values of ``mode``'s changes (None: the rows as produced)."""
        if mode in self.kernel_transformed:
            return kernel_transformed_values(self.env[MASK_ENV].encode())
        if mode not in self.transformed:
            return None
        return transformed_values(self.env[MASK_ENV].encode())

    def _row_columns(self, table: str, mode: str) -> str:
        """The row columns, NULL for one the table does not have yet (before schema v2)."""
        result = self.client.query(f"SELECT * FROM `{table}` LIMIT 0").result()
        present = {f.name for f in result.schema}
        return ", ".join(f"`{c}`" if c in present else f"NULL AS `{c}`" for c in self.columns(mode))

    def current_rows(self, mode: str) -> list[tuple]:
        table = f"{self.dataset}.customers_{mode}"
        sql = (
            f"SELECT {self._row_columns(table, mode)}, _op, _source_ts_ms, _deleted, "
            f"_kafka_partition, _kafka_offset FROM `{table}`"
        )
        return [tuple(row) for row in self.client.query(sql).result()]

    def history_rows(self, mode: str) -> list[tuple]:
        table = f"{self.dataset}.customers_{mode}_history"
        sql = (
            f"SELECT {self._row_columns(table, mode)}, _op, _deleted, _valid_from, _valid_to, "
            f"_is_current FROM `{table}`"
        )
        return [tuple(row) for row in self.client.query(sql).result()]

    def differences(self) -> dict[str, dict[str, int]]:
        """Per mode: rows of ``D.T`` and ``D.T_history`` the oracle lacks (``extra``), oracle
        rows missing, and keys with more than one current row (all 0 when right)."""
        out = {}
        for mode in MODES:
            current = self.current_rows(mode)
            values = self.row_values(mode)
            expected = current_state(self.produced(mode), hard=mode == "hard", row_values=values)
            hist = self.history_rows(mode)
            expected_history = history(self.produced(mode), values)
            keys = [row[0] for row in current]
            out[mode] = {
                "current_rows": len(current),
                "history_rows": len(hist),
                "duplicate_keys": len(keys) - len(set(keys)),
                "current_extra": len(set(current) - expected),
                "current_missing": len(expected - set(current)),
                "history_extra": len(set(hist) - expected_history) + len(hist) - len(set(hist)),
                "history_missing": len(expected_history - set(hist)),
            }
        return out

    def changelog_accounting(self, mode: str) -> dict[str, int]:
        """The changelog of ``mode`` against what was produced, by (partition, offset): every
        change (tombstones aside) exactly once. ``duplicates``: copies beyond the first;
        ``losses``: changes found nowhere; ``unexpected``: rows of offsets never produced of
        a change (all 0 when right)."""
        expected = {
            (p.partition, p.offset) for p in self.produced(mode) if not p.change.is_tombstone
        }
        sql = (
            f"SELECT _kafka_partition, _kafka_offset "
            f"FROM `{self.dataset}.customers_{mode}_changelog`"
        )
        found = Counter((int(r[0]), int(r[1])) for r in self.client.query(sql).result())
        return {
            "expected": len(expected),
            "rows": sum(found.values()),
            "duplicates": sum(n - 1 for n in found.values()),
            "losses": len(expected - set(found)),
            "unexpected": len(set(found) - expected),
        }

    def remove(self) -> None:
        for name in (self.dataset, f"dead_{self.run}"):
            self.client.delete_dataset(name, delete_contents=True, not_found_ok=True)
        self.topics.delete()


def wrong(differences: dict[str, dict[str, int]]) -> int:
    """How many rows or keys are wrong in :meth:`KeyedRig.differences`."""
    return sum(
        n
        for counts in differences.values()
        for k, n in counts.items()
        if k not in ("current_rows", "history_rows")
    )
