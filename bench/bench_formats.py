"""Every message format's stage rate next to Avro's, in one table (issue 15's figure).

Runs ``bench_stage.py`` once per format over the same 16-field row — framed Avro (the native
kernel and the Python path), Debezium envelopes into a keyed topic, schemaless JSON, framed
JSON under a registry JSON Schema, framed Protobuf, framed Avro with the transforms the kernel
does (``--transforms``), schemaless JSON with masks and a timestamp the kernel rewrites
(``--json-transforms``), and the Avro backlog archived undecoded
(``format: raw``, key and headers kept) — each in its own process, at the same N, without the
per-step breakdown, then prints msg/s and CPU µs per message per format, target and stage path
(the native kernel and the Python path, when the kernel is built), the raw consume rate of
that format's own topic (the fastest tuned plain consumer, ``bench_stage.py``'s reference) and
the stage rate's ratio to it, and writes ``bench/results/formats.json``. The per-format reports
stay in ``bench/results/``.

    .venv/bin/python bench/bench_formats.py [--messages 200000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
FORMATS = {  # format → bench_stage.py flags
    "avro": [],
    "debezium": ["--debezium"],
    # the real Postgres connector's envelope (24 column types, timestamptz and numeric
    # re-encoded: core/formats/connect_types.py)
    "debezium_postgres": ["--debezium-postgres"],
    "json": ["--json-values"],
    "json_schema": ["--json-schema-values"],
    "protobuf": ["--protobuf-values"],
    "raw": ["--raw-values"],  # the avro backlog's bytes, archived undecoded (format: raw)
    "avro_transforms": ["--transforms"],  # Avro with the transforms the kernel does
    # JSON with an hmac mask, a null mask and a numeric timestamp (rewritten by the kernel)
    "json_transforms": ["--json-values", "--json-transforms"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages", type=int, default=200_000, help="N per format (default 200,000)"
    )
    parser.add_argument("--only", nargs="*", choices=sorted(FORMATS), help="a subset of formats")
    args = parser.parse_args(argv)
    rows = []
    for name in args.only or FORMATS:
        out = BENCH / "results" / f"formats_{name}.json"
        command = [
            sys.executable,
            str(BENCH / "bench_stage.py"),
            "--messages",
            str(args.messages),
            "--breakdown",
            "0",
            "--json",
            str(out),
            *FORMATS[name],
        ]
        print(f"--- {name}: {' '.join(command[1:])}", flush=True)
        if subprocess.run(command).returncode != 0:
            print(f"{name}: the benchmark failed (above)", file=sys.stderr)
            return 1
        report = json.loads(out.read_text())
        raw = max(
            b["messages_per_s"]
            for b in report["baselines"]
            if b["reader"] in ("raw_tuned", "raw_stage_tuned")
        )
        for stage in report["stage"]:
            rows.append(
                {
                    "format": name,
                    "target": stage["target"],
                    "stage_path": stage["stage_path"],
                    "messages_per_s": stage["messages_per_s"],
                    "cpu_us_per_message": stage.get("cpu_us_per_message"),
                    "bad_input": stage.get("bad_input", 0),
                    "raw_consume_per_s": raw,
                    "ratio_to_raw": round(stage["messages_per_s"] / raw, 3),
                    "kernel_handbacks": stage.get("kernel_handbacks") or {},
                    # The share of messages the kernel staged itself (the rest handed back).
                    "kernel_share": round(
                        1 - sum((stage.get("kernel_handbacks") or {}).values()) / args.messages, 4
                    )
                    if stage["stage_path"] == "native"
                    else None,
                }
            )
    print(f"\n{'format':12} {'target':6} {'path':7} {'msg/s':>10} {'CPU µs/msg':>11} "
          f"{'raw msg/s':>10} {'ratio':>6} {'kernel':>7}")  # fmt: skip
    for row in rows:
        print(
            f"{row['format']:12} {row['target']:6} {row['stage_path']:7} "
            f"{row['messages_per_s']:>10,} {row['cpu_us_per_message'] or 0:>11.2f} "
            f"{row['raw_consume_per_s']:>10,} {row['ratio_to_raw']:>6.2f} "
            + (f"{row['kernel_share']:>7.1%}" if row["kernel_share"] is not None else f"{'':>7}")
        )
    result = BENCH / "results" / "formats.json"
    result.write_text(json.dumps({"messages": args.messages, "rows": rows}, indent=2))
    print(f"\nwritten {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
