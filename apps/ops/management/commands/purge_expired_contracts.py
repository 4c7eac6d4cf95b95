from apps.ops.management.jobcommand import JobCommand


class Command(JobCommand):
    job_name = "purge_expired_contracts"
