"""Who owns a registered name when several plugins claim it: one rule, applied to every kind.

1. A name claimed by one distribution is that distribution's.
2. Built-ins (ncd-core and the first-party packages in ``FIRST_PARTY``, recognised by
   distribution name) win over third parties.
3. A third party replaces a built-in only when both keys turn: its registration declares
   ``override=True`` and the user names it in ``NCD_PLUGIN_PREFER=name=distribution``.
4. Between third parties nothing wins silently: the user picks one with ``NCD_PLUGIN_PREFER``,
   otherwise the name is refused (a lookup raises ``PluginError`` naming every owner).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "FIRST_PARTY",
    "PREFER_ENV",
    "Claim",
    "Collision",
    "Owner",
    "PluginWarning",
    "normalise",
    "parse_prefer",
    "resolve",
    "warn",
]

PREFER_ENV = "NCD_PLUGIN_PREFER"

#: Distributions whose registrations are built-ins, in the order that breaks a tie between two.
FIRST_PARTY = ("ncd-core", "ncd-torch", "ncd-opencl", "ncd-cuda", "ncd-diagram", "ncd-perf")


class PluginWarning(RuntimeWarning):
    """A plugin failed to load, or a name collision was resolved (once per collision)."""


def warn(message: str) -> None:
    warnings.warn(message, PluginWarning, stacklevel=3)


def normalise(distribution: str) -> str:
    """Distribution names compare as pip does (``My_Dist`` is ``my-dist``)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


@attrs.frozen
class Owner:
    """A plugin (entry-point name) and the distribution that ships it."""

    plugin: str
    distribution: str
    version: str

    @property
    def builtin(self) -> bool:
        return normalise(self.distribution) in FIRST_PARTY

    @property
    def core(self) -> bool:
        return normalise(self.distribution) == "ncd-core"

    def describe(self) -> str:
        return f"{self.distribution} {self.version} (plugin {self.plugin!r})"


@attrs.frozen
class Claim:
    """One registration of ``name`` in the table ``kind`` (``backend``, ``command``...).
    ``protected`` marks a claim that counts as built-in whatever its owner (the owner of a
    target keeps its own lowerings); ``item`` None stands for "the owner's own rule"."""

    kind: str
    name: str
    item: Any
    owner: Owner
    override: bool = False
    protected: bool = False

    @property
    def builtin(self) -> bool:
        return self.protected or self.owner.builtin


@attrs.frozen
class Collision:
    """Several distributions claimed one name; ``winner`` None means the name is refused."""

    kind: str
    name: str
    owners: tuple[Owner, ...]
    winner: Owner | None
    rule: str
    builtins: tuple[Owner, ...] = ()  # the owners that counted as built-in

    @property
    def overridden(self) -> bool:
        """A third party replaced a built-in (both keys turned)."""
        return (
            self.winner is not None and bool(self.builtins) and (self.winner not in self.builtins)
        )

    def describe(self) -> str:
        owners = " and ".join(o.describe() for o in self.owners)
        outcome = f"{self.winner.describe()} is used" if self.winner is not None else "none is used"
        return f"{self.kind} {self.name!r} is claimed by {owners}: {outcome} ({self.rule})"

    def refusal(self) -> str:
        """The error for a use of a refused name: every owner, and how the user picks one."""
        choices = " or ".join(f"{PREFER_ENV}={self.name}={o.distribution}" for o in self.owners)
        return f"{self.describe()}. Fix: choose one with {choices}, or uninstall one of them"


def parse_prefer(text: str) -> tuple[dict[str, str], list[str]]:
    """``"opencl=my-dist, draw=other"`` -> ({name: distribution}, [malformed entries])."""
    prefer: dict[str, str] = {}
    bad: list[str] = []
    for entry in (e.strip() for e in text.split(",")):
        name, eq, dist = entry.partition("=")
        if not entry:
            continue
        if not eq or not name.strip() or not dist.strip():
            bad.append(entry)
            continue
        prefer[name.strip()] = normalise(dist.strip())
    return prefer, bad


def _rank(claim: Claim) -> int:
    dist = normalise(claim.owner.distribution)
    return FIRST_PARTY.index(dist) if dist in FIRST_PARTY else len(FIRST_PARTY)


def resolve(
    claims: Sequence[Claim], prefer: Mapping[str, str]
) -> tuple[Claim | None, Collision | None]:
    """The claim that owns one name (None: refused) and the collision, if there was one.
    ``claims`` all share ``kind`` and ``name``; a distribution's first claim speaks for it."""
    firsts: dict[str, Claim] = {}
    for c in claims:
        firsts.setdefault(normalise(c.owner.distribution), c)
    cands = list(firsts.values())
    if len(cands) == 1:
        return cands[0], None
    kind, name = cands[0].kind, cands[0].name
    builtins = sorted((c for c in cands if c.builtin), key=_rank)
    third = [c for c in cands if not c.builtin]
    owners = tuple(c.owner for c in cands)

    def collision(winner: Owner | None, rule: str) -> Collision:
        return Collision(kind, name, owners, winner, rule, tuple(c.owner for c in builtins))

    chosen = prefer.get(name)
    note = ""
    if chosen is not None:
        picked = firsts.get(chosen)
        if picked is None:
            note = f"; {PREFER_ENV} names {chosen}, which does not register it"
        elif picked.builtin or not builtins:
            return picked, collision(picked.owner, f"chosen by {PREFER_ENV}")
        elif picked.override:
            return picked, collision(
                picked.owner, f"override: it declares override=True and {PREFER_ENV} allows it"
            )
        else:
            note = (
                f"; {PREFER_ENV} names {chosen}, but its registration does not declare "
                "override=True"
            )
    if builtins:
        win = builtins[0]
        if not third:
            return win, collision(
                win.owner, f"first-party packages rank in the order {', '.join(FIRST_PARTY)}{note}"
            )
        return win, collision(
            win.owner,
            f"built-ins win{note}; to let a third party replace "
            f"it, its registration must say override=True and the "
            f"user must set {PREFER_ENV}={name}="
            f"{third[0].owner.distribution}",
        )
    return None, collision(
        None,
        f"two third-party plugins claim it{note}; choose one with "
        f"{PREFER_ENV}={name}={cands[0].owner.distribution}",
    )
