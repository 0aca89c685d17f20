"""In-process fakes of external services, used by the test suite."""
