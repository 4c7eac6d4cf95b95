from apps.ops.management.jobcommand import JobCommand


class Command(JobCommand):
    job_name = "prune_public_tombstones"
