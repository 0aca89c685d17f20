"""Alembic migrations, addressed as the package resource `app.store:migrations`."""
