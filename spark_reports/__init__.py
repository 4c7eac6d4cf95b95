"""PySpark jobs over the mediator's database: extract -> transform -> load.

Nothing here imports from apps/: the jobs run as their own process (locally or submitted to a
cluster) and talk to the database only over JDBC.
"""
