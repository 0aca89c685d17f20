"""The `genai` command: the root group, its command groups and `main`, the console script."""

from __future__ import annotations

import typer

from app.cli.audit import audit_cli  # the admin event log and the audit chain (issue 20)
from app.cli.jobs import drift, jobs_cli
from app.cli.keys import keys_cli
from app.cli.labels import templates_label, templates_labels
from app.cli.pattern_tests import patterns_test, templates_test
from app.cli.patterns import patterns_cli, render
from app.cli.runner import OperatorErrors
from app.cli.serve import serve
from app.cli.snippets import snippets_cli
from app.cli.store import db_cli, templates_cli
from app.cli.teams import teams_cli
from app.cli.usage import usage
from app.cli.verify import provenance_cli, verify  # signed envelopes (issue 20)
from app.cli.webhooks import webhooks_cli
from app.config import get_settings
from app.observability.logging import configure_logging

cli = typer.Typer(
    cls=OperatorErrors,
    help="GenAI Service: a completion gateway with provable provenance.",
    no_args_is_help=True,
)
cli.add_typer(patterns_cli, name="patterns")
cli.add_typer(db_cli, name="db")
cli.add_typer(templates_cli, name="templates")
cli.add_typer(snippets_cli, name="snippets")
cli.add_typer(keys_cli, name="keys")
cli.add_typer(teams_cli, name="teams")
cli.add_typer(jobs_cli, name="jobs")
cli.add_typer(webhooks_cli, name="webhooks")
cli.command("drift")(drift)
cli.command("usage")(usage)
cli.command()(serve)
cli.command()(render)
patterns_cli.command("test")(patterns_test)
templates_cli.command("label")(templates_label)
templates_cli.command("labels")(templates_labels)
templates_cli.command("test")(templates_test)
cli.add_typer(provenance_cli, name="provenance")  # signed envelopes (issue 20)
cli.add_typer(audit_cli, name="audit")  # the admin event log and the audit chain (issue 20)
cli.command("verify")(verify)


@cli.callback()
def _configure() -> None:
    # Commands print their results; only warnings belong beside them. (`serve` configures its own.)
    configure_logging(get_settings().model_copy(update={"log_level": "WARNING"}))


def main() -> None:
    cli()
