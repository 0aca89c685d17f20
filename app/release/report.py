"""What a run of test cases reports: per case its status and messages, and the totals.

The same shape answers `POST /v1/patterns/{name}/test`, feeds the CLI's table and the JUnit
file, and is what a template version's release gate reads (`SuiteReport.failure_messages`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, StrictBool

from app.schemas.base import MODEL, FrozenModel, InputModel, is_unset

CaseStatus = Literal["passed", "failed", "skipped"]


class CaseReport(FrozenModel):
    """One case's outcome. `skipped`: its prompt held, but its answer assertions need a live run."""

    name: str
    status: CaseStatus
    messages: list[str] = Field(
        default_factory=list, description="Why it failed (one sentence each), or why skipped."
    )
    duration_ms: float
    job_id: str | None = Field(
        default=None, exclude_if=is_unset, description="The audited job of a live run's answer."
    )


class SuiteReport(FrozenModel):
    """Every case of one pattern (or template version), in the order they are written."""

    suite: str = Field(description="The pattern's name, or what the caller named the suite.")
    live: bool
    cases: list[CaseReport]
    total: int
    passed: int
    failed: int
    skipped: int
    duration_ms: float

    @classmethod
    def of(cls, suite: str, *, live: bool, cases: list[CaseReport]) -> SuiteReport:
        def count(status: CaseStatus) -> int:
            return sum(1 for case in cases if case.status == status)

        return cls(
            suite=suite,
            live=live,
            cases=cases,
            total=len(cases),
            passed=count("passed"),
            failed=count("failed"),
            skipped=count("skipped"),
            duration_ms=round(sum(case.duration_ms for case in cases), 3),
        )

    @property
    def ok(self) -> bool:
        """No case failed (skipped ones do not count against it)."""
        return self.failed == 0

    def failure_messages(self) -> list[str]:
        """`case NAME: message` for every failure: what a release gate shows a person."""
        return [
            f"case {case.name!r}: {message}"
            for case in self.cases
            if case.status == "failed"
            for message in case.messages
        ]


class PatternTestRun(InputModel):
    """`POST /v1/patterns/{name}/test`: run the cases non-live (default) or live."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={"examples": [{"live": False, "model": None}]},
    )

    live: StrictBool = Field(
        default=False,
        description="Also complete each case that asserts an answer (each an audited job).",
    )
    model: str | None = Field(
        default=None, pattern=MODEL, description="`provider/model` every case uses."
    )
