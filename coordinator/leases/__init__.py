"""Which coordinator node leads: a lease made of conditional appends (architecture 4.2).

`lease.LeaseKeeper` is the pure logic (time as input); `driver.LeaseDriver` runs it against a
LogStore with time.monotonic().
"""

from coordinator.leases.lease import (
    AppendKind,
    AppendLease,
    LeaseConfig,
    LeaseKeeper,
    LeaseValue,
    NotServing,
    Role,
)

__all__ = [
    "AppendKind",
    "AppendLease",
    "LeaseConfig",
    "LeaseKeeper",
    "LeaseValue",
    "NotServing",
    "Role",
]
