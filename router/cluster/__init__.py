"""The cluster: several routers over one PostgreSQL record, every session
driven by exactly one of them (see ``docs/cluster.md``).

- :mod:`router.cluster.lease`: sans-IO, the lease rules (acquire, renew,
  release, the fencing check) and the spread of sessions across routers;
- :mod:`router.cluster.pg`: the same rules as PostgreSQL statements on the
  database's clock (``cluster_leases``), membership (``cluster_routers``),
  the inbox of deliveries for another router's session (``cluster_inbox``,
  woken by LISTEN/NOTIFY), and the fencing check every write carries;
- :mod:`router.cluster.member`: the Trio layer: a router's heartbeat, its
  lease rounds, and the inbox it serves.
"""

from __future__ import annotations

from router._face import face, names

#: Where each public name lives; each is imported on first use (router._face).
_FACE = {
    "router.cluster.lease": (
        "HOLD_MARGIN HeldLeases Lease LeaseBook Plan fair_share hysteresis "
        "plan preference"
    ),
    "router.cluster.member": "ClusterMember ClusterSettings",
    "router.cluster.node": "TRUST_BELIEF_ENV ClusterNode delivery_json open_node",
}

__all__ = names(_FACE)
__getattr__, __dir__ = face(__name__, _FACE)
