"""MariaDB's wake-up counter (issue 24): ``sqlq_wake``, one row.

An idle worker on MariaDB learns of new jobs from the newest id (no LISTEN/NOTIFY there), which
a job made runnable again does not move: an operator's **Retry now** or **Run now**, jobs
released from their dependencies, a woken durable wait, a resumed queue. What sends a
NOTIFY on PostgreSQL adds one to this counter on MariaDB, in its own transaction (seen only
if it commits), and an idle worker reads it beside the newest id.

A table of MariaDB's alone, as the shapes of 0015 are: not a model, nothing elsewhere.
"""


from django.db import migrations

from django_sqlq.migrations._mariadb import on_mariadb

FORWARD = [
    "CREATE TABLE sqlq_wake (id TINYINT UNSIGNED NOT NULL PRIMARY KEY, "
    "n BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
    "INSERT INTO sqlq_wake (id, n) VALUES (1, 0)",
]

BACKWARD = ["DROP TABLE sqlq_wake"]


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0016_step_records"),
    ]

    operations = [
        on_mariadb(FORWARD, BACKWARD),
    ]
