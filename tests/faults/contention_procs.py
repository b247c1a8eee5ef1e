"""Processes for tests/workflows/test_contention_adversary.py (issue 27 adversary):

``python -m tests.faults.contention_procs enqueue SECONDS PATH MODE SEED``: for SECONDS (and at
least MIN_ROUNDS rounds, however slow the machine), rounds of groups of
contention.* jobs (some chains, some atomic, some "victims" an operator cancels, deletes and
retries) and, while workers finish them, jobs that wait for them in awkward shapes: a
diamond (a job waiting for W and for W's own dependency, and W's chain), several
enqueues in one transaction whose dependencies come in descending then ascending id
order, group.then() with extra depends_on, bulk_enqueue(depends_on=...), depends_on on
chains that are still running. MODE ``view``: one transaction a round; ``calls``: each
enqueue alone. Prints ``rounds N``, ``waiters ID,...`` and ``missing N`` (enqueues that
named a victim the operator had deleted: InvalidJobError, documented); exits 1 with the
traceback on any other error.

``python -m tests.faults.contention_procs operate SECONDS SEED``: for SECONDS, cancel
(public cancel(), lifecycle.cancel_or_request), delete, retry and run-now random victims,
in batches whose ids come in random order. Prints ``ops N``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported for real only after setup() (the models need the settings).
    from django_sqlq.api import Dependency
    from django_sqlq.models import Job


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.settings")
    import django

    django.setup()


@dataclass
class Round:
    """One round of ``enqueue``: its group, and the waiters its steps made."""

    name: str
    group: list[Job]
    heads: list[Job]  # the group's jobs that continue a chain
    victims: list[Job]
    pool: list[Job]  # the group and the last jobs of earlier groups
    made: list[Job] = field(default_factory=list)


class Enqueuer:
    """The ``enqueue`` process: what earlier rounds made, that later rounds wait for."""

    STEPS = ("diamond", "desc_asc", "then", "bulk", "chains", "victim")

    def __init__(self, path: str, mode: str, seed: int) -> None:
        self.path = path
        self.mode = mode
        self.rng = random.Random(seed)
        self.waiters: list[int] = []
        self.everything: list[Job] = []  # jobs of earlier groups (may be running now)
        self.mids: list[tuple[Job, Job]] = []  # (W, D): W waits for D
        self.chains: list[Job] = []
        self.missing = 0
        self.rounds = 0

    def spec(self, name: str, **extra: Any) -> dict[str, Any]:
        return {"path": self.path, "name": name, **extra}

    def work(self, name: str, **extra: Any) -> tuple[str, dict[str, Any]]:
        target = "contention.atomic" if extra.get("atomic") else "contention.work"
        return target, self.spec(name, **extra)

    def one_round(self) -> None:
        from django.db import transaction

        r = f"{self.mode}{self.rounds}"
        group, victims = self._group(r)
        heads = [j for j in group if j.payload.get("next")]
        _until_one_starts([j.pk for j in group])
        this = Round(r, group, heads, victims, group + self.everything[-30:])
        steps: dict[str, Callable[[Round], None]] = {
            "diamond": self._diamond,
            "desc_asc": self._desc_asc,
            "then": self._then,
            "bulk": self._bulk,
            "chains": self._chains,
            "victim": self._victim,
        }
        with transaction.atomic() if self.mode == "view" else nullcontext():
            order = list(self.STEPS)
            self.rng.shuffle(order)
            for step in order:
                self._try(steps[step], this)
        self.chains.extend(heads)
        self.everything.extend(group)
        self.waiters.extend(job.pk for job in this.made)
        for job in this.made:
            print(f"W {job.pk} {job.status} {job.blockers_left} {job.depends_on}")
        self.rounds += 1

    def _group(self, r: str) -> tuple[list[Job], list[Job]]:
        """Eight contention.* jobs (some continue a chain, some atomic), and two victims."""
        from django_sqlq import bulk_enqueue

        rng = self.rng
        payloads = []
        for i in range(8):
            extra: dict[str, Any] = {"sleep": rng.choice((0, 0.01, 0.05, 0.15))}
            if rng.random() < 0.4:
                extra["next"] = rng.randint(1, 2)
            if rng.random() < 0.3:
                extra["atomic"] = True
            payloads.append(self.spec(f"{r}-{i}", **extra))
        plain = [p for p in payloads if not p.get("atomic")]
        atomic = [p for p in payloads if p.get("atomic")]
        group = list(bulk_enqueue("contention.work", plain)) if plain else []
        if atomic:
            group += list(bulk_enqueue("contention.atomic", atomic))
        victims = list(
            bulk_enqueue(
                "contention.work",
                [self.spec(f"victim{r}-{k}", sleep=rng.choice((0.3, 0.8))) for k in range(2)],
            )
        )
        return group, victims

    def _try(self, step: Callable[[Round], None], this: Round) -> None:
        from django_sqlq.exceptions import InvalidJobError

        try:
            step(this)
        except InvalidJobError as error:
            # Only when the operator deletes any job (scope "all"): documented.
            if os.environ.get("ADV27_SCOPE") != "all":
                raise
            print(f"missing: {error}")
            self.missing += 1

    def _diamond(self, this: Round) -> None:
        from django_sqlq import enqueue

        r, rng, made = this.name, self.rng, this.made
        d = rng.choice(this.group)
        w = enqueue(*self.work(f"{r}-W"), depends_on=[d])
        made.append(w)
        made.append(enqueue(*self.work(f"{r}-X"), depends_on=[w, d, d.chain]))
        if self.mids:
            ow, od = rng.choice(self.mids)
            made.append(enqueue(*self.work(f"{r}-Y"), depends_on=[od.chain, ow, od, ow.chain]))
        self.mids.append((w, d))

    def _desc_asc(self, this: Round) -> None:
        from django_sqlq import enqueue

        r, rng, made, pool = this.name, self.rng, this.made, this.pool
        some = rng.sample(pool, min(6, len(pool)))
        descending: list[Job] = sorted(some, key=lambda j: -j.pk)
        made.append(enqueue(*self.work(f"{r}-desc"), depends_on=descending))
        other = rng.sample(pool, min(6, len(pool)))
        ascending: list[Job] = sorted(other, key=lambda j: j.pk)
        made.append(enqueue(*self.work(f"{r}-asc"), depends_on=ascending))
        made.append(enqueue(*self.work(f"{r}-ids"), depends_on=[j.pk for j in reversed(pool[:5])]))

    def _then(self, this: Round) -> None:
        from django_sqlq import JobGroup

        extra = [self.rng.choice(self.everything)] if self.everything else []
        this.made.append(
            JobGroup(this.group).then(
                "contention.work", self.spec(f"{this.name}-fan"), depends_on=extra
            )
        )

    def _bulk(self, this: Round) -> None:
        from django_sqlq import bulk_enqueue

        rng, heads = self.rng, this.heads
        deps: list[Dependency] = [
            rng.choice(this.group),
            *(h.chain for h in rng.sample(heads, min(2, len(heads)))),
        ]
        this.made.extend(
            bulk_enqueue(
                "contention.work",
                [self.spec(f"{this.name}-b{k}") for k in range(3)],
                depends_on=deps,
            )
        )

    def _chains(self, this: Round) -> None:
        from django_sqlq import enqueue

        if self.chains:
            rng = self.rng
            picks = rng.sample(self.chains, min(3, len(self.chains)))
            this.made.append(
                enqueue(
                    *self.work(f"{this.name}-ch", atomic=rng.random() < 0.5),
                    depends_on=[c.chain for c in picks] + [rng.choice(this.group)],
                )
            )

    def _victim(self, this: Round) -> None:
        from django_sqlq import enqueue
        from django_sqlq.exceptions import InvalidJobError

        r, rng = this.name, self.rng
        blocked_victim = enqueue(
            "contention.work",
            self.spec(f"victim{r}-blk", sleep=0.2),
            depends_on=[rng.choice(this.group)],
        )
        try:
            this.made.append(
                enqueue(
                    *self.work(f"{r}-onv"),
                    depends_on=[*this.victims, blocked_victim, rng.choice(this.group)],
                    on_dependency_failure="run",
                )
            )
        except InvalidJobError:
            self.missing += 1


def _until_one_starts(ids: list[int]) -> None:
    """Wait (at most 2 s) until a worker has started one of these jobs."""
    from django_sqlq.models import Job, JobStatus

    until = time.monotonic() + 2.0
    while (
        time.monotonic() < until
        and not Job.objects.filter(
            pk__in=ids, status__in=(JobStatus.PROCESSING, JobStatus.COMPLETED)
        ).exists()
    ):
        time.sleep(0.001)


#: Rounds an ``enqueue`` process writes whatever SECONDS allows: a round waits up to 2 s for
#: the workers and takes longer on a loaded machine; the tests want many waiters.
MIN_ROUNDS = 5


def enqueue_main(argv: list[str]) -> int:
    seconds, path, mode, seed = float(argv[0]), argv[1], argv[2], int(argv[3])
    setup()
    enqueuer = Enqueuer(path, mode, seed)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or enqueuer.rounds < MIN_ROUNDS:
        enqueuer.one_round()
    print(f"rounds {enqueuer.rounds}")
    print("waiters " + ",".join(map(str, enqueuer.waiters)))
    print(f"missing {enqueuer.missing}")
    return 0


def operate_main(argv: list[str]) -> int:
    seconds, seed = float(argv[0]), int(argv[1])
    scope = argv[2] if len(argv) > 2 else "victims"
    setup()
    from django_sqlq import cancel, lifecycle
    from django_sqlq.models import Job, JobStatus

    rng = random.Random(seed)
    ops = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs = (
            Job.objects.all()
            if scope == "all"
            else Job.objects.filter(payload__name__startswith="victim")
        )
        victims = list(jobs.values_list("pk", "status"))
        if not victims:
            time.sleep(0.01)
            continue
        rng.shuffle(victims)
        pick = [pk for pk, _ in victims[: rng.randint(1, 6)]]
        action = rng.choice(("cancel", "batch", "delete", "retry", "run_now"))
        if action == "cancel":
            for pk in pick:
                cancel(pk)
        elif action == "batch":
            lifecycle.cancel_or_request(pick)
        elif action == "delete":
            lifecycle.delete(
                [
                    pk
                    for pk, status in victims[:6]
                    if status in (JobStatus.BLOCKED, JobStatus.PENDING)
                ]
            )
        elif action == "retry":
            lifecycle.retry_now(
                [
                    pk
                    for pk, status in victims
                    if status in (JobStatus.CANCELLED, JobStatus.FAILED)
                ][:6]
            )
        else:
            lifecycle.run_now(pick)
        ops += 1
        time.sleep(rng.uniform(0, 0.02))
    print(f"ops {ops}")
    return 0


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    sys.exit(enqueue_main(rest) if command == "enqueue" else operate_main(rest))
