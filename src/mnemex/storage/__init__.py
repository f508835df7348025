"""SQLite storage: connection setup, migrations, transactions."""

from mnemex.storage.connect import connect, read_transaction, translate_errors, write_transaction
from mnemex.storage.migrations import LATEST, TOKENIZER, migrate, read_meta, schema_version

__all__ = [
    "LATEST",
    "TOKENIZER",
    "connect",
    "migrate",
    "read_meta",
    "read_transaction",
    "schema_version",
    "translate_errors",
    "write_transaction",
]
