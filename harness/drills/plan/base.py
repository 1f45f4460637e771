"""What every plan section shares: `Section` (unknown keys refused, frozen, finite numbers) and a hop's name.

Its own module so that the sections (`sections`, `links`, `stack`, `guards`) can each import it without
importing one another.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: a hop's name: the `service` label of its series and the `x-fault-target` that names it
HOP_NAME = r"^[a-z][a-z0-9-]*$"


class Section(BaseModel):
    """A part of a plan: unknown keys refused, frozen once validated."""

    # every number finite (no .inf or .nan) and within a bound of harness.core.limits, which says why
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
