"""The ``mnemex`` command's entry point.

``mnemex hook`` runs before every prompt an agent sends, in a new process: it
is dispatched here without loading the CLI (click and every command's
module), and it ends with ``os._exit`` once its answer is written; everything
else goes to :func:`mnemex.cli.main`, where ``search``, ``add`` and ``recall`` end
with ``os._exit`` too once their store is closed (:data:`mnemex.cli.one_shot`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if "hook" in argv:
        from mnemex.hooks.run import main as hook
        from mnemex.hooks.run import parse_argv

        options = parse_argv(argv)
        if options is not None:
            # A hook process lives for one event: the cyclic garbage collector would only
            # trace, again and again, the objects of the modules it imports (about 3 % of a
            # prompt's time); reference counting frees what the event makes.
            gc.disable()
            hook(**options)
            # The answer is out and the store closed: skip the interpreter's teardown
            # (module cleanup, the model's threads), which the agent would wait for.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    from mnemex import cli

    try:
        cli.main()
    except SystemExit as done:
        code = done.code
        if cli.one_shot and (code is None or isinstance(code, int)) and _idle():
            with contextlib.suppress(OSError):  # else the teardown reports it, as before
                sys.stdout.flush()
                sys.stderr.flush()
                cli.finish()
                os._exit(code or 0)  # the store is closed: skip the teardown, as a hook does
        cli.finish()
        raise


def _idle() -> bool:
    """Whether no search worker still runs a call (see :func:`mnemex.workers.idle`)."""
    workers = sys.modules.get("mnemex.workers")
    return workers is None or bool(workers.idle())
