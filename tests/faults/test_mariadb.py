"""MariaDB's server restarted under running workers (issue 24).

``SQLQ_FAULTS_MARIADB_RESTART=1``: a full server restart in the middle of a drain
(``SQLQ_FAULTS_MARIADB_RESTART_CMD`` restarts it; default: ``start-stop-daemon`` stops the
local ``mariadbd``, waiting for it to exit, and starts it again, as ``.ci/run`` starts it).
Every connection to the server is cut: ``scripts/test`` runs it alone, before the other runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from tests.faults.conftest import Pool, drain_through_a_restart

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

DAEMON = "/usr/sbin/mariadbd"
RESTART = (
    f"start-stop-daemon --stop --exec {DAEMON} --retry TERM/60/KILL/5 && "
    f"start-stop-daemon --start --oknodo --background --exec {DAEMON}"
)


@pytest.mark.server_restart
@pytest.mark.skipif(
    os.environ.get("SQLQ_FAULTS_MARIADB_RESTART") != "1",
    reason="restarts the MariaDB server: set SQLQ_FAULTS_MARIADB_RESTART=1 (.ci/run does)",
)
@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's server")
def test_server_restart_mid_drain(
    tmp_path: Path, pool: Callable[..., Pool], report: Callable[..., None]
) -> None:
    command = os.environ.get("SQLQ_FAULTS_MARIADB_RESTART_CMD") or RESTART
    drain_through_a_restart(tmp_path, pool, report, command, drain_timeout=120)
