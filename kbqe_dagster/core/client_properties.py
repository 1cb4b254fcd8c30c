"""Client properties given as environment variables, and which of them are secret.

Any librdkafka property reaches every Kafka client kbqe builds as ``KBQE_KAFKA_CONF_<name>``,
any schema registry client property as ``KBQE_SCHEMA_REGISTRY_CONF_<name>``, in the manner of
``KBQE_SPARK_CONF_``. What a variable name cannot hold decides the spelling: shells allow only
letters, digits and ``_`` in a name, and a few properties (confluent-kafka's, a plugin's) hold
an ``_`` of their own, so ``KBQE_SPARK_CONF_``'s rule (every ``_`` a dot) cannot reach them.
Here a single ``_`` is a ``.`` and a double ``__`` a literal ``_``; the name is lower-cased
(every librdkafka and registry property is lower case, and shell variables are conventionally
upper case): ``KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION`` is ``ssl.certificate.location``.

This module only reads names. The values stay in the environment until a client is built
(``resources/configurable.py``): the definitions name the variables, never hold their values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kbqe_dagster.core.errors import ConfigError

KAFKA_CONF_PREFIX = "KBQE_KAFKA_CONF_"
REGISTRY_CONF_PREFIX = "KBQE_SCHEMA_REGISTRY_CONF_"

SECRET_HINTS = (
    "password",
    "secret",
    "key",
    "token",
    "credentials",
    "oauthbearer",
    "jaas",
    "user.info",
    "keytab",
)
"""A property is secret when its name holds one of these: ``sasl.password``,
``ssl.key.password``, ``ssl.key.pem`` (a private key itself), ``sasl.oauthbearer.config``
(which may carry a client secret), ``sasl.oauthbearer.client.secret``, ``sasl.jaas.config``,
``basic.auth.user.info``, ``bearer.auth.token``, ... Deliberately broad: hiding a file path
(``ssl.key.location``) costs nothing, showing a key costs everything."""


def is_secret_property(name: str) -> bool:
    """Whether the value of the client property ``name`` must never be shown."""
    lowered = name.lower()
    return any(hint in lowered for hint in SECRET_HINTS)


def redacted(properties: Mapping[str, object]) -> dict[str, object]:
    """``properties`` with the value of every secret one replaced by ``***`` (for a repr)."""
    return {k: ("***" if is_secret_property(k) else v) for k, v in properties.items()}


def property_name(variable: str, prefix: str) -> str:
    """The client property a ``<prefix><name>`` variable sets: ``name`` lower-cased, each
    ``__`` a literal ``_``, each other ``_`` a ``.``. A ConfigError naming the variable when
    that leaves no property or an empty part of one (``A__`` ends in ``_``, fine; ``A_`` or
    ``A__B_`` end in a dot, not a property)."""
    if not variable.startswith(prefix):
        raise ConfigError(f"{variable}: not a {prefix}<property> variable")
    parts = variable[len(prefix) :].lower().split("__")
    name = "_".join(part.replace("_", ".") for part in parts)
    if not name or any(not piece for piece in name.split(".")):
        raise ConfigError(
            f"{variable}: {name!r} is not a client property: after {prefix}, a single _ "
            "stands for a dot and __ for an underscore (KBQE_KAFKA_CONF_SSL_KEY_LOCATION "
            "is ssl.key.location)"
        )
    return name


def property_variables(
    environ: Iterable[str],
    prefix: str,
    explicit: Mapping[str, str] = {},  # noqa: B006 - read only
    reserved: Mapping[str, str] = {},  # noqa: B006 - read only
) -> dict[str, str]:
    """Which variable sets which property: ``{property: variable}`` for every variable of
    ``environ`` (its names) that starts with ``prefix``, and for every variable of
    ``explicit`` (``{variable: property}``, the named variables such as
    ``KBQE_KAFKA_SASL_PASSWORD``) that is set.

    Two variables setting one property is a ConfigError naming both, whichever they are:
    which one wins would otherwise be an accident of the code. ``reserved`` properties
    (``{property: what sets it}``, ``bootstrap.servers`` say) cannot be given with the prefix.
    """
    names = sorted(environ)
    found: dict[str, str] = {}
    for variable in names:
        if variable in explicit:
            _claim(found, explicit[variable], variable)
    for variable in names:
        if not variable.startswith(prefix):
            continue
        prop = property_name(variable, prefix)
        if prop in reserved:
            raise ConfigError(f"{variable}: {prop} is set by {reserved[prop]}, not by {prefix}")
        _claim(found, prop, variable)
    return found


def _claim(found: dict[str, str], prop: str, variable: str) -> None:
    other = found.get(prop)
    if other is not None:
        raise ConfigError(
            f"{other} and {variable} both set the client property {prop}: set it once "
            f"(unset one of them)"
        )
    found[prop] = variable
