"""``dataclass``: the standard library's decorator, with the class built without compiling
most of its methods.

Every value type of mnemex is a dataclass, and a new process (the prompt hook runs in one
before every prompt) builds about thirty of them before its first search. The standard
decorator compiles five or six methods a class from source, one ``exec`` each (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, and ``__setattr__``/``__delattr__`` when frozen),
which is most of the time it takes. Here the standard decorator still reads the fields and
makes the slots (``fields``, ``replace``, ``asdict``, ``is_dataclass`` and pickling work as
ever); only ``__init__`` is compiled, and the other methods are shared functions that read
the class's field names, with the same results as the generated ones.

It takes the flags mnemex uses (``frozen``, ``slots``, ``eq``, ``repr``); a class that defines
one of those methods itself, or inherits from another dataclass, is left to the standard
decorator.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T", bound=type)
_OWN = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


class _Factory:
    """The default of a parameter whose field has a ``default_factory``."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(
    cls: _T | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    eq: bool = True,
    repr: bool = True,
) -> Any:
    """:func:`dataclasses.dataclass` with these flags, built without compiling most methods."""

    def wrap(cls: _T) -> _T:
        return _build(cls, frozen=frozen, slots=slots, eq=eq, repr=repr)

    return wrap if cls is None else wrap(cls)


def _build(cls: _T, *, frozen: bool, slots: bool, eq: bool, repr: bool) -> _T:
    own = vars(cls)
    if any(name in own for name in _OWN) or any(
        dataclasses.is_dataclass(base) for base in cls.__mro__[1:]
    ):
        standard: Any = dataclasses.dataclass(frozen=frozen, slots=slots, eq=eq, repr=repr)
        return standard(cls)  # type: ignore[no-any-return]
    documented = bool(own.get("__doc__"))
    if not documented:
        cls.__doc__ = "-"  # written below, once the class has its __init__
    made: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    fields = dataclasses.fields(made)
    made.__init__ = _init(made, fields, frozen)
    if not documented:  # as the standard decorator writes it
        made.__doc__ = _signature(made)
    compared = _values([f.name for f in fields if f.compare])
    if repr:
        made.__repr__ = _repr_of([f.name for f in fields if f.repr])
    if eq:
        made.__eq__ = _eq_of(compared)
        made.__hash__ = _hash_of(compared) if frozen else None
    if frozen:
        made.__setattr__, made.__delattr__ = _frozen(made, {f.name for f in fields})
        if slots:
            made.__getstate__, made.__setstate__ = _state(fields)
    params = made.__dataclass_params__
    for flag, value in (("init", True), ("repr", repr), ("eq", eq), ("frozen", frozen)):
        object.__setattr__(params, flag, value)
    return made  # type: ignore[no-any-return]


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool) -> Any:
    """``__init__``, compiled from source as the standard decorator writes it."""
    scope: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    params, lines = ["self"], []
    for field in fields:
        name, value = field.name, field.name
        if field.default_factory is not dataclasses.MISSING:
            scope[f"_factory_{name}"] = field.default_factory
            value = f"_factory_{name}()"
            if field.init:
                params.append(f"{name}=_FACTORY")
                value = f"{value} if {name} is _FACTORY else {name}"
        elif field.default is not dataclasses.MISSING:
            scope[f"_default_{name}"] = field.default
            params.append(f"{name}=_default_{name}")
            value = name if field.init else f"_default_{name}"
        elif field.init:
            params.append(name)
        else:
            continue
        lines.append(f"_set(self, {name!r}, {value})" if frozen else f"self.{name} = {value}")
    source = f"def __init__({', '.join(params)}):\n    " + ("\n    ".join(lines) or "pass")
    exec(source, scope)  # the source is made of the class's own field names
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {f.name: f.type for f in fields if f.init} | {"return": None}
    return init


def _signature(cls: type) -> str:
    import inspect  # only for a class without a docstring

    return cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these attributes of an object, as the generated methods compare it."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _repr_of(names: list[str]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        pairs = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({pairs})"

    return __repr__


def _eq_of(compared: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    return __eq__


def _hash_of(compared: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(compared(self))

    return __hash__


def _frozen(cls: Any, names: set[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _state(
    fields: tuple[dataclasses.Field[Any], ...],
) -> tuple[Callable[[Any], list[Any]], Callable[[Any, list[Any]], None]]:
    """Pickling and copying of a frozen class with slots, as the standard decorator adds."""

    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, f.name) for f in fields]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for field, value in zip(fields, state, strict=False):
            object.__setattr__(self, field.name, value)

    return __getstate__, __setstate__
