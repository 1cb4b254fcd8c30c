"""Seeded random scenarios of ``format: json`` topics with ``destinations``, for the kernel's
differential test (test_json_destination_kernel.py): the JSON kernel fuzz's scenarios (random
declared schemas, values and spellings, bad input) with kernel-able topic transforms
(``with_kernel_transforms``, masks, timestamps and exact casts among them) and the topic's routing replaced by random destinations as the
Avro destinations fuzz draws them (avro_destination_fuzz.py ``with_destinations``)."""

from __future__ import annotations

import random
from typing import Any

from kbqe_dagster_tests.formats import json_fuzz
from kbqe_dagster_tests.formats.avro_destination_fuzz import with_destinations

_transformed = json_fuzz.with_kernel_transforms(json_fuzz.scenario, rewrites=True)


def scenario(seed: int, messages: int) -> Any:
    case = _transformed(seed, messages)
    with_destinations(case, [case.schema], random.Random(seed * 7919 + 1))
    return case
