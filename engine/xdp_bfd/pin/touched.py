"""Which sessions were touched since a ``--pin`` warm-up encoded them, known without reading each.

At a takeover's request the old engine hands over every session's state, and
its warm-up has encoded each one already (``state.rehearse``). What the
request still has to learn is which sessions changed since: reading every
session's values to find that out was most of the request's work at 1024
sessions (docs/benchmarks.md, "A takeover's request reads only the sessions
touched"). Instead the warm-up *watches* each session before it encodes it:
the entry, its machine and its drop counts become instances of subclasses
that note the session's discriminator on every attribute set (and every drop
counted), and the request reads only the sessions noted.

Only the objects' class changes: every reference to them stays valid and they
behave as before. The note, a set insertion per attribute set, is paid from a
warm-up to the exit (after a takeover that failed, until the process ends).
It errs one way only: a set that changes nothing is still a touch, which costs
the request one comparison (``state._record_text``), never a stale record.
What no note can see, and why it does not matter: a value changed in place
other than the drop counts. The machine changes only through its own methods,
which set its attributes; the transmitter an entry holds keeps its port for
its life (the socket is bound to it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..core.host import Entry
from ..session import Session

# The sessions touched since taken() last emptied it, by discriminator.
_touched: set[int] = set()
# Where a watched entry and its drop counts keep their session's discriminator.
_KEY = "_touched_key"


def taken() -> set[int]:
    """The sessions touched since the last call (or since the first watch), and none after it."""
    global _touched  # swapped rather than copied: the request takes it in one step
    out, _touched = _touched, set()
    return out


def forget() -> None:
    """Start counting afresh: a warm-up about to encode every session again."""
    _touched.clear()


class _Drops(Counter):
    """An entry's drop counts that note the session on every change (counted in place)."""

    __slots__ = ()

    def _note(self) -> None:
        key = self.__dict__.get(_KEY)
        if key is not None:  # None: a copy (Counter.copy makes one of its class), nobody's counts yet
            _touched.add(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._note()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._note()

    def update(self, *args: Any, **kwargs: Any) -> None:
        # Counter.update into an empty counter is dict.update, which no __setitem__ sees.
        super().update(*args, **kwargs)
        self._note()

    def clear(self) -> None:
        super().clear()
        self._note()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self._note()
        return value

    def popitem(self) -> tuple[Any, Any]:
        item = super().popitem()
        self._note()
        return item

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._note()
        return value


class _Session(Session):
    """A session's machine that notes itself on every attribute it sets."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        _touched.add(self.local_discr)


class _Entry(Entry):
    """An entry that notes its session on every attribute set, and watches what it is given."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        key = self.__dict__.get(_KEY)
        if key is None:  # being made (a copy's __init__): nothing of it was encoded yet
            return
        _touched.add(key)
        if name in ("session", "drops"):
            if _watch_parts(key, self):
                _blind.discard(key)
            else:  # a part no note can see change: the request reads the session every time
                _blind.add(key)


# Sessions whose parts could not be watched (a machine or counts of another type).
_blind: set[int] = set()


def blind() -> set[int]:
    """Sessions whose changes no note can tell: the request reads them every time."""
    return _blind


def _watch_parts(key: int, entry: Entry) -> bool:
    session, drops = entry.session, entry.drops
    if type(session) is Session and session.local_discr == key:
        session.__class__ = _Session
    elif type(session) is not _Session or session.local_discr != key:
        return False
    if type(drops) is Counter:
        drops.__class__ = _Drops
    elif type(drops) is not _Drops:
        return False
    drops.__dict__[_KEY] = key
    return True


def watch(key: int, entry: Any) -> bool:
    """Note every later change of session ``key`` (its entry ``entry``); False when it cannot be.

    A table entry (:class:`~xdp_bfd.core.host.Entry`) around a machine
    (:class:`~xdp_bfd.session.Session`) and a ``Counter`` can; anything else
    (another type, a subclass of its own, a machine under another discriminator)
    cannot, and the request must read that session.
    """
    if type(entry) is _Entry:
        return entry.__dict__[_KEY] == key and key not in _blind
    if type(entry) is not Entry or not _watch_parts(key, entry):
        return False
    entry.__dict__[_KEY] = key
    entry.__class__ = _Entry
    _blind.discard(key)
    return True
