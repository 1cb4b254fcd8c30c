"""The local development stack: real Kafka (KRaft), Apicurio Registry, fake-gcs-server and
the BigQuery emulator, installed and started by the project itself on 127.0.0.1.

Driven by ``kbqe stack up|down|status`` (and ``make stack-up`` / ``make stack-down``).
State lives under ``.kbqe-local/`` (git-ignored): downloads in ``cache/``, and per service
its pid file, log and data in ``run/<service>/``. Only processes recorded in our pid files
are ever stopped.

May import core/ and processes.py; reached from the rest of the package only through
resources/environment.py (and by the CLI and the demo)."""
