"""SQLite storage: connection setup, migrations, transactions."""

from mnemex.storage.connect import connect, read_transaction, translate_errors, write_transaction
from mnemex.storage.migrations import LATEST, TOKENIZER, migrate, read_meta, schema_version
from mnemex.storage.sql import IN_CHUNK, OPTIMIZE_MAX_ROWS, marks

__all__ = [
    "IN_CHUNK",
    "LATEST",
    "OPTIMIZE_MAX_ROWS",
    "TOKENIZER",
    "connect",
    "marks",
    "migrate",
    "read_meta",
    "read_transaction",
    "schema_version",
    "translate_errors",
    "write_transaction",
]
