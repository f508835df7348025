"""The ``mnemex`` command's entry point.

``mnemex hook`` runs before every prompt an agent sends, in a new process: it
is dispatched here without loading the CLI (click and every command's
module), and it ends with ``os._exit`` once its answer is written; everything
else goes to :func:`mnemex.cli.main`, where ``search``, ``add`` and ``recall`` end
with ``os._exit`` too once their store is closed (:data:`mnemex.cli.one_shot`).
Either way ``inspect`` is imported only when something reads it (:func:`_defer`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import types


class _Deferred(types.ModuleType):
    """A module of the standard library imported on its first use (an attribute read)."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = __import__(self.__name__)
        self.__dict__.update(real.__dict__)  # later reads find it here
        return getattr(real, name)


def _defer(name: str) -> None:
    """Put a :class:`_Deferred` in place of the top-level module ``name``, unless it is
    imported already: ``dataclasses`` imports ``inspect`` (and with it ``ast``, ``dis``
    and ``tokenize``, about 6 ms) for the docstring of a class that has none, and on
    Python 3.12 and later for each class's annotations; mnemex's value types have their
    docstrings, so on 3.11 a hook or a command that never reads a signature skips it."""
    if name in sys.modules:
        return
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, None) if find is not None else None
        if spec is not None:
            stand_in = _Deferred(name)
            stand_in.__spec__ = spec
            sys.modules[name] = stand_in
            return


def main() -> None:
    argv = sys.argv[1:]
    _defer("inspect")
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
