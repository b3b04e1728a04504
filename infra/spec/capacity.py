"""Where a TPU pool's VMs come from: its capacity options (on-demand, spot, DWS flex-start, a reservation).

``capacity: spot`` is shorthand for ``capacity: {mode: spot}``; ``capacity: [a, b, ...]``
lists options in priority order (``TpuPoolSpec`` keeps the first in ``capacity`` and the
rest as its fallback). ``CapacityOption`` is one option as the stack and Kueue see it: its
node pools and its ResourceFlavor; a capacity list's reservations fold into one option
whose ``alternates`` ``infra deploy`` tries in turn (``infra.reservation_fallback``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from infra.naming import GCE_NAME_MAX, GCP_ID
from infra.spec.messages import loc_text, problem_and_fix
from infra.spec.section import FieldValueError, Section
from toolkit.names import DNS1035_LABEL, CapacityMode

# GKE: flex-start VMs live at most 7 days (the default, too).
FLEX_MAX_RUN_SECONDS = 7 * 24 * 3600


class OnDemand(Section):
    mode: Literal[CapacityMode.ON_DEMAND.value]


class Spot(Section):
    mode: Literal[CapacityMode.SPOT.value]


class ProvisioningRetry(Section):
    """How Kueue retries a refused ProvisioningRequest (its ProvisioningRequestConfig's retryStrategy)."""

    limit: int = Field(3, ge=0, le=100, description="retries before the admission check rejects the run (Kueue deactivates it)")
    base_seconds: int = Field(60, ge=1, le=86400, description="first backoff; it doubles per retry")
    max_seconds: int = Field(1800, ge=1, le=86400)

    @model_validator(mode="after")
    def _bounds(self) -> ProvisioningRetry:
        if self.max_seconds < self.base_seconds:
            raise FieldValueError("max_seconds", f"{self.max_seconds} is below base_seconds ({self.base_seconds})", "raise max_seconds")
        return self


class FlexStart(Section):
    """DWS flex-start. Without ``queued`` (xpk's mode) the autoscaler adds a slice's VMs when
    pods wait for them; with ``queued`` a Kueue admission check asks GKE for the whole slice
    (a ProvisioningRequest) and admits the run only once it is there."""

    mode: Literal[CapacityMode.FLEX_START.value]
    queued: bool = Field(False, description="queued provisioning: a Kueue ProvisioningRequest admission check on this option's flavor")
    max_run_seconds: int | None = Field(
        None, ge=600, le=FLEX_MAX_RUN_SECONDS, description="how long GKE keeps the VMs (max_run_duration; GKE's default and cap: 7 days)"
    )
    retry: ProvisioningRetry = Field(default_factory=ProvisioningRetry, description="queued only: Kueue's retries of a refused request")

    @model_validator(mode="after")
    def _retry_needs_queue(self) -> FlexStart:
        if not self.queued and "retry" in self.model_fields_set:
            raise FieldValueError("retry", "only applies to queued provisioning", "set queued: true or remove retry")
        return self


class Reservation(Section):
    mode: Literal[CapacityMode.RESERVATION.value]
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX)
    zone: str = Field(..., description="zone the reservation lives in; must be the pool's zone")
    project: str | None = Field(None, pattern=GCP_ID, description="owner project of a shared reservation (a GCP project id)")


Capacity = Annotated[Union[OnDemand, Spot, FlexStart, Reservation], Field(discriminator="mode")]


def capacity_shorthand(v: Any) -> Any:
    # `capacity: spot` is allowed as shorthand for `capacity: {mode: spot}`.
    return {"mode": v} if isinstance(v, str) else v


_CAPACITY_ADAPTER: TypeAdapter[Any] = TypeAdapter(Capacity)
# Node-pool name tags of the capacity options of a pool with a fallback list.
OPTION_TAGS = {CapacityMode.ON_DEMAND: "od", CapacityMode.SPOT: "spot", CapacityMode.FLEX_START: "flex"}
# Most interruption-prone first: a run that may land on any option is planned for the worst.
RUN_MODE_ORDER = (CapacityMode.SPOT, CapacityMode.FLEX_START, CapacityMode.ON_DEMAND, CapacityMode.RESERVATION)


def option_key(cap: Any) -> str:
    return f"reservation {cap.name}" if isinstance(cap, Reservation) else cap.mode


def parse_capacity_list(items: list[Any]) -> list[Any]:
    """``capacity: [a, b, ...]``: each option validated, errors named ``capacity[k]...``, no repeats."""
    if not items:
        raise FieldValueError("capacity", "is an empty list", "list at least one option, e.g. [spot], or write capacity: spot")
    out = []
    for k, item in enumerate(items):
        try:
            out.append(_CAPACITY_ADAPTER.validate_python(capacity_shorthand(item)))
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            problem, fix = problem_and_fix({**err, "loc": ("capacity", *err["loc"])})
            where = loc_text(("capacity", *err["loc"])).removeprefix("capacity")
            raise FieldValueError(f"capacity[{k}]{where}", problem, fix) from None
    seen: dict[str, int] = {}
    for k, cap in enumerate(out):
        key = option_key(cap)
        if key in seen:
            raise FieldValueError(f"capacity[{k}]", f"repeats capacity[{seen[key]}] ({key})", "list each capacity option once")
        seen[key] = k
    return out


class CapacityOption(BaseModel):
    """One capacity option of a pool, in priority order: its node pools and its Kueue flavor."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    index: int
    capacity: Any  # one of OnDemand, Spot, FlexStart, Reservation
    tag: str  # "" for a pool with one option (its node pools keep the plain <pool>-<slice> names)
    # The later reservations of a capacity list, in order: the reservations are tried at pool
    # creation (infra.reservation_fallback), one at a time, for the same node pools and Kueue flavor.
    alternates: tuple[Any, ...] = ()

    @property
    def mode(self) -> str:
        return str(self.capacity.mode)

    @property
    def choices(self) -> tuple[Any, ...]:
        """What ``infra deploy`` may create this option's node pools from, in the order it tries them."""
        return (self.capacity, *self.alternates)

    def reservation(self, name: str | None = None) -> Any:
        """The reservation its node pools consume: ``name`` (one of ``choices``), default the first."""
        if name is None:
            return self.capacity
        return next(c for c in self.choices if isinstance(c, Reservation) and c.name == name)


def flex_start_words(field: str, cap: FlexStart) -> tuple[str, str]:
    """The key a flex-start refusal names under capacity option ``field``, and what it calls the option."""
    if cap.queued:
        return f"{field}.queued", "queued provisioning (DWS flex-start)"
    return f"{field}.mode", "DWS flex-start"
