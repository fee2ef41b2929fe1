"""The contracts plugins fulfil: small abstract classes, capabilities declared as data."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

__all__ = [
    "PLANS",
    "TUNES",
    "Backend",
    "Command",
    "CostModel",
    "DemoStep",
    "Executable",
    "Exporter",
    "Lowering",
    "OpDefinition",
    "Renderer",
]


class Executable(abc.ABC):
    """A compiled model: call it on NumPy arrays (and ``params=``) to get NumPy arrays."""

    @abc.abstractmethod
    def __call__(self, *inputs: Any, params: Any = None) -> Any: ...


#: the capability of a backend that plans its own kernels (``Backend.plan``, ``ncd.plan``)
PLANS = "plan"
#: the capability of a backend whose schedule space ``ncd.tune`` searches (``Backend.candidates``,
#: ``kernel_keys``, ``measure``, ``device_key``; needs ``PLANS`` too)
TUNES = "tune"


class Backend(abc.ABC):
    """An executable target. ``capabilities`` may hold ``float64``, ``training``, ``gpu``...
    and ``"plan"`` (``PLANS``): the backend plans its kernels itself (``plan``).
    ``override = True`` declares that it is meant to replace a built-in backend of the same name
    (it then also needs the user's ``NCD_PLUGIN_PREFER=name=distribution``; the same holds for
    every kind of registration, see ``ncd.plugins.precedence``)."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""
    override: ClassVar[bool] = False
    #: the ``compile`` options that are options of ``plan`` (``ncd.tune`` passes them there)
    plan_options: ClassVar[frozenset[str]] = frozenset()
    #: the ncd-perf machine ``ncd.tune`` ranks this backend's candidates on (``None``: unranked)
    tuning_machine: ClassVar[str | None] = None

    @abc.abstractmethod
    def compile(self, model: Any, **options: Any) -> Executable:
        """Turn a model (a term) into an executable for this target."""

    def unavailable(self) -> str | None:
        """Why this backend cannot run models on this machine (its device, driver or runtime is
        missing, with the fix), or ``None`` when it can. Cheap and never raising: test suites
        and ``ncd plugins`` ask it; ``compile``'s executables still raise a typed error."""
        return None

    def resources(self, plan: Any) -> dict[str, dict[str, int]]:
        """What the compiled kernels of ``plan`` (one of this backend's plans) use, by plan
        kernel name: ``threads`` per block, ``registers`` per thread, ``shared_bytes`` per
        block, as the backend's compiler reports them (ncd-perf's occupancy reads them);
        ``{}`` for a backend with no such report."""
        return {}

    def plan(self, graph: Any, *, tiles: Any = None, **options: Any) -> Any:
        """The ``ncd.kernel.FusionPlan`` (``target`` = this backend's name) this backend renders
        for ``graph``, its own tile choices recorded as ``Kernel.choices`` and ``tiles``
        (``ncd.planning.apply_tiles``) applied. Only called when ``capabilities`` holds
        ``"plan"``; ``compile(model, plan=...)`` then renders exactly that plan."""
        raise NotImplementedError(f"backend {self.name!r} does not plan its kernels")

    # -- the schedule space (capability ``"tune"``, see ``ncd.tuning``) ------------------------
    def candidates(self, kernel: Any, **options: Any) -> list[Any]:
        """The schedules this backend can render for one kernel of its plan, as
        ``ncd.tuning.Candidate`` values (a label equal for identical kernels, and the kernel's
        full choices), the plan's own choice first; one candidate: nothing to tune.
        ``options``: the ``compile`` options the candidates are for."""
        raise NotImplementedError(f"backend {self.name!r} declares no schedule space")

    def kernel_keys(self, plan: Any, **options: Any) -> list[str]:
        """Per kernel of ``plan``, a digest of what it computes, equal for identical kernels
        (a model's layers) and stable across processes (the tuning cache's key)."""
        raise NotImplementedError(f"backend {self.name!r} declares no schedule space")

    def measure(
        self, graph: Any, plan: Any, inputs: Any, params: Any, reps: int, **options: Any
    ) -> tuple[Any, list[float]]:
        """Run ``plan`` on the device: its outputs for ``inputs`` and, per plan kernel, the
        median seconds of ``reps`` launches."""
        raise NotImplementedError(f"backend {self.name!r} declares no schedule space")

    def device_key(self, **options: Any) -> str:
        """The device, platform and driver that ``compile(model, **options)`` runs on (a
        measurement holds for these only)."""
        raise NotImplementedError(f"backend {self.name!r} declares no schedule space")


class Exporter(abc.ABC):
    """A translation target (a PyTorch module, kernel source, a file format)."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    override: ClassVar[bool] = False

    @abc.abstractmethod
    def export(self, model: Any, **options: Any) -> Any: ...


class Renderer(abc.ABC):
    """Draws a model; ``formats`` lists what ``render`` can produce (``svg``, ``dot``, ``png``)."""

    name: ClassVar[str]
    formats: ClassVar[tuple[str, ...]] = ()
    override: ClassVar[bool] = False

    @abc.abstractmethod
    def render(self, model: Any, fmt: str, **options: Any) -> str | bytes: ...


class CostModel(abc.ABC):
    """Prices a model on a machine description."""

    name: ClassVar[str]
    override: ClassVar[bool] = False

    @abc.abstractmethod
    def cost(self, model: Any, machine: Any, **options: Any) -> Any: ...


@attrs.frozen
class OpDefinition:
    """A new op kind (an ``ncd.ops.Op`` subclass) and its reference rule
    ``rule(op, inputs, params, ctx) -> outputs`` (see ``ncd.reference``)."""

    op: type
    reference: Callable[..., Sequence[Any]]
    override: bool = False  # op kinds are never replaced: kept for a uniform registration API


@attrs.frozen
class Lowering:
    """How backend ``target`` runs op kind ``kind``; the rule's shape is the backend's own.
    A lowering of an op kind ncd-core defines replaces the target's own codegen: it is used only
    from the target's own distribution, or with ``override=True`` allowed by the user
    (``NCD_PLUGIN_PREFER=target/kind=distribution``)."""

    target: str
    kind: str
    rule: Callable[..., Any]
    override: bool = False


@attrs.frozen
class Command:
    """An ``ncd`` subcommand: ``configure(parser)`` adds arguments, ``run(args)`` returns an exit
    code. With ``target`` set, it is the handler of ``ncd NAME --target TARGET`` for one backend
    (only the core's ``compile`` dispatches so); it then registers as ``NAME/TARGET``."""

    name: str
    help: str
    configure: Callable[[Any], None]
    run: Callable[[Any], int]
    override: bool = False
    target: str | None = None


@attrs.frozen
class DemoStep:
    """A section of ``ncd demo``. ``run(ctx)`` prints its part; ``ctx`` is a dict holding at least
    ``model`` (bound GPT), ``params``, ``tokens``, ``logits`` (reference output), ``out`` (a folder
    for files); steps may add keys for later ones."""

    name: str
    order: int
    run: Callable[[dict[str, Any]], None]
