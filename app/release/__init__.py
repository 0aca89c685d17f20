"""Release flow for prompts: test cases of patterns (and template versions), run and reported.

cases.py reads them, assertions.py checks one, runner.py runs a list (free of pattern files, so
a template version's gate reuses it), suite.py wires a pattern's, junit.py writes CI's file.
"""

from app.release.assertions import prompt_hash, prompt_text
from app.release.cases import load_pattern_cases, parse_cases, tests_file
from app.release.gate import PatternTestGate, suite_name, version_ref
from app.release.junit import junit_xml, write_junit
from app.release.report import CaseReport, PatternTestRun, SuiteReport
from app.release.runner import LiveAnswer, case_request, render_through, run_case, run_cases
from app.release.suite import pattern_cases, run_pattern_suite

__all__ = [
    "CaseReport",
    "LiveAnswer",
    "PatternTestGate",
    "PatternTestRun",
    "SuiteReport",
    "case_request",
    "junit_xml",
    "load_pattern_cases",
    "parse_cases",
    "pattern_cases",
    "prompt_hash",
    "prompt_text",
    "render_through",
    "run_case",
    "run_cases",
    "run_pattern_suite",
    "suite_name",
    "tests_file",
    "version_ref",
    "write_junit",
]
