"""Can a cluster hold a request? Placement-group bundles against node resources, with no Ray.

Ray never rejects a request that cannot fit: it waits, forever, in PENDING. Smoke answers
the question up front from `ray.nodes()`, so `--gpus 1` on a cluster without GPUs fails in
a second with the numbers that show why, instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass

Bundle = dict[str, float]

# Resources Ray adds to every node that no request competes for in a way worth showing.
HIDDEN = ("node:", "accelerator_type:")
GIB = float(1 << 30)


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    ip: str
    hostname: str
    total: Bundle

    def describe(self) -> str:
        return f"{self.ip} ({self.hostname}): {describe(self.total)}"


def _amount(name: str, value: float) -> str:
    if name in ("memory", "object_store_memory"):
        return f"{value / GIB:.1f} GiB {name.replace('_', ' ')}"
    number = f"{value:g}"
    return f"{number} {name}{'s' if name in ('CPU', 'GPU') and value != 1 else ''}"


def describe(resources: Bundle, keys: tuple[str, ...] = ("CPU", "GPU")) -> str:
    """'2 CPUs, 0 GPUs' (and any other resource a request names)."""
    shown = dict.fromkeys(keys, 0.0)
    shown.update({k: v for k, v in resources.items() if not k.startswith(HIDDEN)})
    return ", ".join(
        _amount(k, v) for k, v in shown.items() if k not in ("memory", "object_store_memory")
    )


def fits(bundle: Bundle, free: Bundle) -> bool:
    return all(free.get(name, 0.0) + 1e-9 >= amount for name, amount in bundle.items() if amount)


def place(bundles: list[Bundle], nodes: list[NodeResources]) -> list[Bundle]:
    """The bundles that find no node, first-fit in decreasing size (Ray's PACK, roughly).

    First-fit decreasing can miss a packing that exists; for the few identical bundles smoke
    asks for (one trial, W equal workers) it cannot, and for a relaunch it is what Ray does.
    """
    free = [dict(node.total) for node in nodes]
    unplaced = []
    for bundle in sorted(bundles, key=lambda b: sorted(b.items(), reverse=True), reverse=True):
        for capacity in free:
            if fits(bundle, capacity):
                for name, amount in bundle.items():
                    capacity[name] = capacity.get(name, 0.0) - amount
                break
        else:
            unplaced.append(bundle)
    return unplaced


def total(bundles: list[Bundle]) -> Bundle:
    summed: Bundle = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            summed[name] = summed.get(name, 0.0) + amount
    return summed


def shortfall(need: Bundle, have: Bundle) -> dict[str, tuple[float, float]]:
    """{resource: (needed, present)} for each resource `have` lacks."""
    return {
        name: (amount, have.get(name, 0.0))
        for name, amount in need.items()
        if amount and have.get(name, 0.0) + 1e-9 < amount
    }
