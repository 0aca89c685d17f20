"""Durable state: tables, repositories, migrations; SQLite/PostgreSQL differences stay here."""
