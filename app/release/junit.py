"""JUnit XML of suite reports, the format CI systems read: one <testsuite> per pattern.

A failed case is a <failure> (its first message as the attribute, all of them as the text), a
skipped one a <skipped>; times are in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from app.release.report import SuiteReport


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.3f}"


def junit_xml(reports: Sequence[SuiteReport]) -> ET.ElementTree:
    root = ET.Element(
        "testsuites",
        name="genai patterns test",
        tests=str(sum(r.total for r in reports)),
        failures=str(sum(r.failed for r in reports)),
        skipped=str(sum(r.skipped for r in reports)),
        errors="0",
        time=_seconds(sum(r.duration_ms for r in reports)),
    )
    for report in reports:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=report.suite,
            tests=str(report.total),
            failures=str(report.failed),
            skipped=str(report.skipped),
            errors="0",
            time=_seconds(report.duration_ms),
        )
        for case in report.cases:
            element = ET.SubElement(
                suite,
                "testcase",
                classname=f"patterns.{report.suite}",
                name=case.name,
                time=_seconds(case.duration_ms),
            )
            if case.status == "failed":
                failure = ET.SubElement(
                    element, "failure", message=case.messages[0], type="assertion"
                )
                failure.text = "\n".join(case.messages)
            elif case.status == "skipped":
                ET.SubElement(element, "skipped", message="; ".join(case.messages))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(reports: Sequence[SuiteReport], path: str | Path) -> None:
    """Write the reports as one JUnit XML file (UTF-8, with its declaration)."""
    junit_xml(reports).write(Path(path), encoding="utf-8", xml_declaration=True)
