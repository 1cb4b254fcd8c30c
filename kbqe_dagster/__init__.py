"""kbqe_dagster: Kafka → BigQuery, exactly once, as a Dagster asset platform on Spark.

What user code imports from the top of the package: a ``format: decoder`` topic's decoder
receives a :class:`RawMessage` and raises :class:`DecodeError` to refuse a message
(core/formats/decoders.py). Both come from ``core/``, which imports no system, so importing the
package stays cheap.
"""

from kbqe_dagster.core.errors import DecodeError
from kbqe_dagster.core.formats.decoders import RawMessage

__all__ = ["DecodeError", "RawMessage"]
