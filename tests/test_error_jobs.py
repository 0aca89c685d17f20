"""`GenAIError.with_job`: a failed completion's error names its job from the moment it is made."""

from __future__ import annotations

from app.errors import GenAIError, MissingVariables, StoreUnavailable, UpstreamRateLimited


def test_a_new_error_names_no_job() -> None:
    assert GenAIError("boom").job_id is None


def test_with_job_is_a_new_error_of_the_same_type_and_body() -> None:
    original = UpstreamRateLimited(
        "slow down", retry_after=3.2, provider="openai", upstream_status=429
    )
    named = original.with_job("abc123")
    assert type(named) is UpstreamRateLimited and named is not original
    assert named.job_id == "abc123" and original.job_id is None
    assert (named.message, named.details(), named.headers()) == (
        original.message,
        original.details(),
        original.headers(),
    )
    assert str(named) == str(original)


def test_with_job_works_for_errors_whose_constructor_takes_other_arguments() -> None:
    named = MissingVariables("summarize", ["text", "audience"]).with_job("j1")
    assert named.missing == ["audience", "text"] and named.job_id == "j1"


def test_with_job_keeps_the_cause_the_operator_log_reads() -> None:
    cause = ConnectionRefusedError("db down")
    try:
        raise StoreUnavailable("store is down") from cause
    except StoreUnavailable as exc:
        named = exc.with_job("j2")
    assert named.__cause__ is cause and named.__traceback__ is not None
