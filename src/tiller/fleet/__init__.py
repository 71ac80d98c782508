"""Fleets: runs queued on the store's job queue and run by workers, under limits the whole
fleet shares (`FleetLimits`, `LimitedModel`)."""

from ._limit_records import MalformedLimitRecord
from ._limited_model import LimitedModel

# For tiller's own packages (not API; not in __all__).
from ._limits import LIMITS_BUCKET as LIMITS_BUCKET
from ._limits import FleetLimits, ModelLimit, provider_of

__all__ = [
    "FleetLimits",
    "LimitedModel",
    "MalformedLimitRecord",
    "ModelLimit",
    "provider_of",
]
