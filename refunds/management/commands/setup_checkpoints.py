"""From one process at deploy: PostgresSaver.setup() raced on an empty schema fails the loser."""

from django.core.management.base import BaseCommand, CommandError

from refunds import persistence


class Command(BaseCommand):
    help = "Create the LangGraph checkpoint and store tables (idempotent; run once per deploy)."

    def handle(self, *args, **options):
        url = persistence.checkpoint_url()
        if not url.startswith("sqlite:"):
            _check_reachable(url)  # the pool would only say "couldn't get a connection" after 30 s
        persistence.setup_persistence()
        where = url if url.startswith("sqlite:") else "PostgreSQL " + _dbname(url)
        self.stdout.write(f"Checkpoint and store tables are ready in {where}.")


def _dbname(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(conninfo).get("dbname", "?"))


def _check_reachable(conninfo: str) -> None:
    import psycopg

    try:
        psycopg.connect(conninfo, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        raise CommandError(f"Cannot reach the checkpoint database: {exc}".strip()) from None
