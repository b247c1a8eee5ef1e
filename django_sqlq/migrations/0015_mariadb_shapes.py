"""MariaDB's shapes for what partial indexes do on the other engines (issue 24).

MariaDB has no partial indexes: Django creates an index with a condition without it (the
whole table) and skips a unique constraint with a condition. On MariaDB only, this migration
gives each reader an index led by ``status`` (the rows it wants are one range), and the two
conditional unique constraints their equivalents:

- ``sqlq_job_claim_idx`` (status, queue, priority DESC, scheduled_at, id): the claim and
  ``pending_queues()``.
- ``sqlq_job_scheduled_idx`` (status, scheduled_at): ``promote()``, ``next_due_in()``.
- ``sqlq_job_failed_idx`` (status, id): the failed jobs newest first; with ``status =
  'processing'``, the few running rows of the reaper, the queue limits' counts and the
  cancel requests. So ``sqlq_job_lease_idx`` and ``sqlq_job_cancel_idx`` are dropped here:
  each index led by ``status`` is rewritten by every claim and every completion.
- ``sqlq_job_finished_idx`` (status, completed_at): as created.
- ``sqlq_job_unique_key_live``: a unique index on the generated column ``live_unique_key``,
  the key while the job is live and NULL after (NULLs never collide), which
  ``INSERT IGNORE`` of a unique enqueue runs into.
- ``sqlq_job_chain_step_unique`` (chain_id, chain_index): a plain unique index (jobs outside
  chains have NULLs, which never collide).

And every table's text compares byte for byte, trailing spaces included
(``utf8mb4_nopad_bin``), as on the other engines.

Elsewhere it does nothing: the state of the models is unchanged.
"""


from django.db import migrations

from django_sqlq.migrations._mariadb import on_mariadb

from django_sqlq import statuses

LIVE = ", ".join(f"'{status}'" for status in statuses.LIVE)

#: Every table of django_sqlq, whose text compares byte for byte as on the other engines:
#: MariaDB's default collations fold case and ignore trailing spaces, so that the queues
#: "emails" and "Emails", or the unique keys "k" and "k ", would be one.
TABLES = [
    "sqlq_job",
    "sqlq_job_blocker",
    "sqlq_job_step",
    "sqlq_event",
    "sqlq_queue",
    "sqlq_maintenance",
    "sqlq_schedule",
    "sqlq_schedule_tick",
    "sqlq_worker",
]

FORWARD = [
    *(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin" for table in TABLES),
    "ALTER TABLE sqlq_job "
    "DROP INDEX sqlq_job_claim_idx, "
    "ADD INDEX sqlq_job_claim_idx (status, queue, priority DESC, scheduled_at, id), "
    "DROP INDEX sqlq_job_scheduled_idx, "
    "ADD INDEX sqlq_job_scheduled_idx (status, scheduled_at), "
    "DROP INDEX sqlq_job_failed_idx, "
    "ADD INDEX sqlq_job_failed_idx (status, id), "
    "DROP INDEX sqlq_job_lease_idx, "
    "DROP INDEX sqlq_job_cancel_idx, "
    "ADD COLUMN live_unique_key VARCHAR(255) "
    f"AS (CASE WHEN status IN ({LIVE}) THEN unique_key END) VIRTUAL, "
    "ADD UNIQUE INDEX sqlq_job_unique_key_live (live_unique_key), "
    "ADD UNIQUE INDEX sqlq_job_chain_step_unique (chain_id, chain_index)",
]

BACKWARD = [
    "ALTER TABLE sqlq_job "
    "DROP INDEX sqlq_job_chain_step_unique, "
    "DROP INDEX sqlq_job_unique_key_live, "
    "DROP COLUMN live_unique_key, "
    "ADD INDEX sqlq_job_cancel_idx (locked_by), "
    "ADD INDEX sqlq_job_lease_idx (lease_expires_at), "
    "DROP INDEX sqlq_job_failed_idx, "
    "ADD INDEX sqlq_job_failed_idx (id DESC), "
    "DROP INDEX sqlq_job_scheduled_idx, "
    "ADD INDEX sqlq_job_scheduled_idx (scheduled_at), "
    "DROP INDEX sqlq_job_claim_idx, "
    "ADD INDEX sqlq_job_claim_idx (queue, priority DESC, scheduled_at, id)",
]


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0014_steps_events"),
    ]

    operations = [
        on_mariadb(FORWARD, BACKWARD),
    ]
