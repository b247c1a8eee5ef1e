"""Processes for tests/test_workflow_contention.py (issue 27 adversary):

``python -m tests.faults.contention_procs enqueue SECONDS PATH MODE SEED``: rounds of groups of
contention.* jobs (some chains, some atomic, some "victims" an operator cancels, deletes and
retries) and, while workers finish them, jobs that wait for them in awkward shapes: a
diamond (a job waiting for W and for W's own dependency, and W's chain), several
enqueues in one transaction whose dependencies come in descending then ascending id
order, group.then() with extra depends_on, bulk_enqueue(depends_on=...), depends_on on
chains that are still running. MODE ``view``: one transaction a round; ``calls``: each
enqueue alone. Prints ``rounds N``, ``waiters ID,...`` and ``missing N`` (enqueues that
named a victim the operator had deleted: InvalidJobError, documented); exits 1 with the
traceback on any other error.

``python -m tests.faults.contention_procs operate SECONDS SEED``: for SECONDS, cancel (public cancel(), lifecycle.cancel_or_request),
delete, retry and run-now random victims, in batches whose ids come in random order.
Prints ``ops N``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from contextlib import nullcontext


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.settings")
    import django

    django.setup()


def enqueue_main(argv: list[str]) -> int:
    seconds, path, mode, seed = float(argv[0]), argv[1], argv[2], int(argv[3])
    setup()
    from django.db import transaction

    from django_sqlq import JobGroup, bulk_enqueue, enqueue
    from django_sqlq.exceptions import InvalidJobError
    from django_sqlq.models import Job, JobStatus

    rng = random.Random(seed)
    waiters: list[int] = []
    everything: list = []  # jobs of earlier groups (may be running now)
    mids: list = []  # (W, D): W waits for D
    chains: list = []
    missing = 0
    rounds = 0
    deadline = time.monotonic() + seconds

    def spec(name: str, **extra):
        return {"path": path, "name": name, **extra}

    def work(name: str, **extra):
        return ("contention.atomic" if extra.get("atomic") else "contention.work"), spec(
            name, **extra
        )

    while time.monotonic() < deadline:
        r = f"{mode}{rounds}"
        payloads = []
        for i in range(8):
            extra = {"sleep": rng.choice((0, 0.01, 0.05, 0.15))}
            if rng.random() < 0.4:
                extra["next"] = rng.randint(1, 2)
            if rng.random() < 0.3:
                extra["atomic"] = True
            payloads.append(spec(f"{r}-{i}", **extra))
        plain = [p for p in payloads if not p.get("atomic")]
        atomic = [p for p in payloads if p.get("atomic")]
        group = list(bulk_enqueue("contention.work", plain)) if plain else []
        if atomic:
            group += list(bulk_enqueue("contention.atomic", atomic))
        victims = list(
            bulk_enqueue(
                "contention.work",
                [spec(f"victim{r}-{k}", sleep=rng.choice((0.3, 0.8))) for k in range(2)],
            )
        )
        heads = [j for j in group if j.payload.get("next")]
        ids = [j.pk for j in group]
        until = time.monotonic() + 2.0
        while (
            time.monotonic() < until
            and not Job.objects.filter(
                pk__in=ids, status__in=(JobStatus.PROCESSING, JobStatus.COMPLETED)
            ).exists()
        ):
            time.sleep(0.001)
        made: list = []
        pool = group + everything[-30:]
        with transaction.atomic() if mode == "view" else nullcontext():
            steps = ["diamond", "desc_asc", "then", "bulk", "chains", "victim"]
            rng.shuffle(steps)
            for step in steps:
                try:
                    if step == "diamond":
                        d = rng.choice(group)
                        w = enqueue(*work(f"{r}-W"), depends_on=[d])
                        made.append(w)
                        made.append(enqueue(*work(f"{r}-X"), depends_on=[w, d, d.chain]))
                        if mids:
                            ow, od = rng.choice(mids)
                            made.append(
                                enqueue(*work(f"{r}-Y"), depends_on=[od.chain, ow, od, ow.chain])
                            )
                        mids.append((w, d))
                    elif step == "desc_asc":
                        some = rng.sample(pool, min(6, len(pool)))
                        made.append(
                            enqueue(
                                *work(f"{r}-desc"),
                                depends_on=sorted(some, key=lambda j: -j.pk),
                            )
                        )
                        other = rng.sample(pool, min(6, len(pool)))
                        made.append(
                            enqueue(
                                *work(f"{r}-asc"), depends_on=sorted(other, key=lambda j: j.pk)
                            )
                        )
                        made.append(
                            enqueue(
                                *work(f"{r}-ids"), depends_on=[j.pk for j in reversed(pool[:5])]
                            )
                        )
                    elif step == "then":
                        extra = [rng.choice(everything)] if everything else []
                        made.append(
                            JobGroup(group).then(
                                "contention.work", spec(f"{r}-fan"), depends_on=extra
                            )
                        )
                    elif step == "bulk":
                        deps = [
                            rng.choice(group),
                            *(h.chain for h in rng.sample(heads, min(2, len(heads)))),
                        ]
                        made.extend(
                            bulk_enqueue(
                                "contention.work",
                                [spec(f"{r}-b{k}") for k in range(3)],
                                depends_on=deps,
                            )
                        )
                    elif step == "chains":
                        if chains:
                            picks = rng.sample(chains, min(3, len(chains)))
                            made.append(
                                enqueue(
                                    *work(f"{r}-ch", atomic=rng.random() < 0.5),
                                    depends_on=[c.chain for c in picks] + [rng.choice(group)],
                                )
                            )
                    elif step == "victim":
                        blocked_victim = enqueue(
                            "contention.work",
                            spec(f"victim{r}-blk", sleep=0.2),
                            depends_on=[rng.choice(group)],
                        )
                        try:
                            made.append(
                                enqueue(
                                    *work(f"{r}-onv"),
                                    depends_on=[*victims, blocked_victim, rng.choice(group)],
                                    on_dependency_failure="run",
                                )
                            )
                        except InvalidJobError:
                            missing += 1
                except InvalidJobError as error:
                    # Only when the operator deletes any job (scope "all"): documented.
                    if os.environ.get("ADV27_SCOPE") != "all":
                        raise
                    print(f"missing: {error}")
                    missing += 1
        chains.extend(heads)
        everything.extend(group)
        waiters.extend(job.pk for job in made)
        for job in made:
            print(f"W {job.pk} {job.status} {job.blockers_left} {job.depends_on}")
        rounds += 1
    print(f"rounds {rounds}")
    print("waiters " + ",".join(map(str, waiters)))
    print(f"missing {missing}")
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
