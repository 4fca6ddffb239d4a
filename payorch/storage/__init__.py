"""Storage: the only place with SQL. Pool, migrations, and one module per table group."""
