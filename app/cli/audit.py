"""`genai audit verify` and `genai audit checkpoint`: the tamper-evident audit chain (issue 20).

Exit codes of verify: 0 the chain verifies; 1 it does not (one line naming the first problem,
its kind, entry and record; the whole report with --json); 2 bad input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.runner import run
from app.errors import ConfigurationError
from app.schemas import ChainReport

if TYPE_CHECKING:
    from app.runtime import Runtime

audit_cli = typer.Typer(help="The tamper-evident audit chain: verify it, sign its head.")


def _chain_off() -> ConfigurationError:
    return ConfigurationError("GENAI_AUDIT__CHAIN_ENABLED", "is false: there is no audit chain")


def _summary(report: ChainReport) -> str:
    counts = (
        f"{report.entries_checked} entries ({report.from_seq}..{report.to_seq}), "
        f"{report.checkpoints_checked} checkpoints"
        + (f" ({report.unsigned_checkpoints} unsigned)" if report.unsigned_checkpoints else "")
        + (f", {report.pruned} pruned" if report.pruned else "")
    )
    problem = report.problem
    if problem is None:
        more = f"; more from {report.next_from}" if report.next_from is not None else ""
        return f"ok: {counts}{more}"
    where = " ".join(
        part
        for part in (
            f"at seq {problem.seq}" if problem.seq is not None else "",
            f"ref {problem.ref}" if problem.ref is not None else "",
        )
        if part
    )
    return f"{problem.kind} {where}: {problem.detail} (checked {counts})"


@audit_cli.command("verify")
def audit_verify(
    from_seq: Annotated[int, typer.Option("--from", min=1, help="First entry to check.")] = 1,
    to_seq: Annotated[
        int | None, typer.Option("--to", min=1, help="Last entry to check (default: the head).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The whole report as JSON.")] = False,
) -> None:
    """Walk the chain and name the first entry edited, deleted, inserted or reordered, and a
    tail cut since the last checkpoint: exit 0 ok, 1 a problem, 2 bad input."""
    if to_seq is not None and to_seq < from_seq:
        raise ConfigurationError("--to", f"must not be below --from ({from_seq})")

    async def work(runtime: Runtime) -> ChainReport:
        if runtime.chain is None:
            raise _chain_off()
        return await runtime.chain.verify(from_seq, to_seq)

    report = run(work)
    typer.echo(report.model_dump_json(indent=2) if as_json else _summary(report))
    if not report.ok:
        raise typer.Exit(code=1)


@audit_cli.command("checkpoint")
def audit_checkpoint() -> None:
    """Link what is finished, then sign the chain head now (reason `manual`)."""

    async def work(runtime: Runtime) -> str:
        if runtime.chainer is None:
            raise _chain_off()
        await runtime.chainer.run_once(wait=True)
        checkpoint = await runtime.chainer.checkpoint("manual")
        signed = f"signed by {checkpoint.kid}" if checkpoint.kid else "unsigned (signing is off)"
        return f"checkpoint at seq {checkpoint.seq}: {checkpoint.head_sha256} {signed}"

    typer.echo(run(work))
