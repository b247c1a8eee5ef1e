"""MariaDB's wake-up counter in slots (issue 24): ``sqlq_wake`` gets rows 2 to 64.

What makes a job runnable again adds one to the counter of 0017 in the caller's transaction,
whose lock on that row lasts until it commits. With one row, every other such write waited
for it: a request that emitted an event (or retried a job) and kept its transaction open
held up each worker whose completions released dependent jobs, and with them every later
completion of those workers, and an operator's pause or resume, for as long as it stayed
open (an adversary's request of 20 s: no completion recorded for 24 s). Now a writer takes
the first row no other transaction holds (``SKIP LOCKED``), and an idle worker reads the
sum. Nothing elsewhere: a table of MariaDB's alone.
"""


from django.db import migrations

from django_sqlq.migrations._mariadb import on_mariadb

#: The rows of ``sqlq_wake`` (``django_sqlq.db.mysql.WAKE_SLOTS``, as this migration wrote).
SLOTS = 64

FORWARD = [
    "INSERT IGNORE INTO sqlq_wake (id, n) VALUES "
    + ", ".join(f"({slot}, 0)" for slot in range(2, SLOTS + 1))
]
BACKWARD = [
    "UPDATE sqlq_wake SET n = (SELECT total FROM (SELECT SUM(n) AS total FROM sqlq_wake) AS s) "
    "WHERE id = 1",
    "DELETE FROM sqlq_wake WHERE id > 1",
]


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0018_status_conditions"),
    ]

    operations = [
        on_mariadb(FORWARD, BACKWARD),
    ]
