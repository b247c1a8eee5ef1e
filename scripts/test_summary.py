"""Summarise a scripts/test run: a table of every run, then one pytest-shaped closing line.

Usage: python scripts/test_summary.py RESULTS.tsv TOTAL_SECONDS

RESULTS.tsv has one row per run: kind (pytest|check), name, status (an exit code or
"skipped"), seconds, JUnit XML path (pytest rows), detail. The last line printed is, like
pytest's own, "==== 3 failed, 409 passed, 3 skipped in 801.23s (0:13:21) ====". Every pytest
run's tests are added up; a failed check, or a pytest run that failed without a failing test
in its JUnit file (no tests collected, a crash, a coverage error), adds one "failed".
Exits 1 when anything failed. Standard library only: it runs in any of the venvs.
"""

from __future__ import annotations

import datetime
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# pytest's exit codes other than 0 (all passed) and 1 (some failed).
PYTEST_EXIT = {
    "2": "interrupted",
    "3": "internal error",
    "4": "usage error",
    "5": "no tests collected",
}

# pytest's order of outcomes in its closing line.
OUTCOMES = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "error")


@dataclass
class Run:
    kind: str
    name: str
    status: str
    seconds: float
    junit: str
    detail: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def skipped_run(self) -> bool:
        return self.status == "skipped"

    @property
    def ok(self) -> bool:
        return self.status == "0"


def junit_counts(path: Path) -> dict[str, int] | None:
    """passed/failed/error/skipped/xfailed counted from one pytest JUnit XML file.

    As in pytest's own count, an error in teardown comes on top of the test's outcome. JUnit
    does not tell an xpassed test from a passed one, so xpassed tests count as passed.
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    counts = dict.fromkeys(("passed", "failed", "error", "skipped", "xfailed"), 0)
    seen: set[tuple[str | None, str | None]] = set()
    for case in root.iter("testcase"):
        tags = [child.tag for child in case]
        errors = [child for child in case if child.tag == "error"]
        counts["error"] += len(errors)
        key = (case.get("classname"), case.get("name"))
        if key in seen:
            continue  # a second element for a test that failed and then errored in teardown
        seen.add(key)
        # An error in teardown comes on top of the test's own outcome, as in pytest's count.
        teardown_only = all(
            (error.get("message") or "").startswith("failed on teardown") for error in errors
        )
        if "failure" in tags:
            counts["failed"] += 1
        elif "skipped" in tags:
            skipped = case.find("skipped")
            xfail = skipped is not None and skipped.get("type") == "pytest.xfail"
            counts["xfailed" if xfail else "skipped"] += 1
        elif teardown_only:
            counts["passed"] += 1
    return counts


def read_runs(results: Path) -> list[Run]:
    runs = []
    for line in results.read_text().splitlines():
        if not line.strip():
            continue
        kind, name, status, seconds, junit, detail = (line.split("\t") + [""] * 6)[:6]
        run = Run(kind, name, status, float(seconds or 0), junit, detail)
        if kind == "pytest" and junit:
            counts = junit_counts(Path(junit))
            if counts is None:
                run.detail = run.detail or "no JUnit report"
                if run.ok:
                    run.status = "no-junit"  # exit 0 without a report is not a pass
            else:
                run.counts = counts
        runs.append(run)
    return runs


def describe(counts: dict[str, int]) -> str:
    parts = []
    for outcome in OUTCOMES:
        n = counts.get(outcome, 0)
        if not n:
            continue
        label = outcome
        if outcome == "error":
            label = "error" if n == 1 else "errors"
        elif outcome == "warnings" and n == 1:
            label = "warning"
        parts.append(f"{n} {label}")
    return ", ".join(parts) or "no tests ran"


def session_duration(seconds: float) -> str:
    """pytest's format_session_duration."""
    if seconds < 60:
        return f"{seconds:.2f}s"
    return f"{seconds:.2f}s ({datetime.timedelta(seconds=int(seconds))})"


def sep(title: str, fullwidth: int = 80) -> str:
    """pytest's TerminalWriter.sep("=", title) at 80 columns."""
    n = max((fullwidth - len(title) - 2) // 2, 1)
    line = f"{'=' * n} {title} {'=' * n}"
    if len(line) + 1 <= fullwidth:
        line += "="
    return line


def main(argv: list[str]) -> int:
    results, total_seconds = Path(argv[1]), float(argv[2])
    runs = read_runs(results)

    totals = dict.fromkeys(OUTCOMES, 0)
    any_failure = False
    rows = []
    for run in runs:
        if run.skipped_run:
            result = "SKIPPED"
        elif run.ok:
            result = "ok"
        else:
            result = "FAILED"
            any_failure = True
        for outcome, n in run.counts.items():
            totals[outcome] += n
        failing_tests = run.counts.get("failed", 0) + run.counts.get("error", 0)
        if not run.ok and not run.skipped_run and failing_tests == 0:
            totals["failed"] += 1  # the run itself, or the check, is the failure
        outcome_text = describe(run.counts) if run.kind == "pytest" and run.counts else ""
        exit_text = ""
        if not run.ok and not run.skipped_run and run.status.isdigit() and failing_tests == 0:
            meaning = PYTEST_EXIT.get(run.status, "") if run.kind == "pytest" else ""
            exit_text = f"exit {run.status}" + (f" ({meaning})" if meaning else "")
        info = "; ".join(part for part in (outcome_text, exit_text, run.detail) if part)
        rows.append((run.name, result, f"{run.seconds:.1f}s", info))

    print()
    print(sep("scripts/test summary"))
    if rows:
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    skipped_pg = [run.name for run in runs if run.skipped_run]
    if skipped_pg:
        print(f"WARNING: {len(skipped_pg)} run(s) SKIPPED: PostgreSQL was unreachable.")
    print(sep(f"{describe(totals)} in {session_duration(total_seconds)}"))
    return 1 if any_failure or not runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
