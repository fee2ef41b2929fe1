"""The Sugiyama steps of one block's layout: layers, dummy chains, barycenter ordering, and a
crossing count to check the result."""

from __future__ import annotations

import itertools

from ncd.graph import Graph
from ncd_diagram._geometry import Layout, Placed, Port, Route, mid

__all__ = ["SWEEPS", "assign_layers", "crossings", "dummies", "order"]

SWEEPS = 4


def assign_layers(
    nodes: list[Placed], edges: list[tuple[tuple[int, int], tuple[int, int]]]
) -> None:
    """Longest path from the input boundary; sources with no inputs sit just before their first
    consumer; the output boundary takes the last layer."""
    preds: dict[int, list[int]] = {}
    succs: dict[int, list[int]] = {}
    for (a, _), (b, _) in edges:
        if a < b:  # children are in node order, so this keeps the graph acyclic
            preds.setdefault(b, []).append(a)
            succs.setdefault(a, []).append(b)
    last = len(nodes) - 1
    for i in range(1, last):
        nodes[i].layer = 1 + max((nodes[j].layer for j in preds.get(i, [])), default=0)
    for i in range(last - 1, 0, -1):  # pull input-less nodes next to their consumers
        if not preds.get(i) and succs.get(i):
            nodes[i].layer = max(1, min(nodes[j].layer for j in succs[i]) - 1)
    nodes[last].layer = 1 + max((n.layer for n in nodes[:last]), default=0)


def dummies(
    nodes: list[Placed],
    edges: list[tuple[tuple[int, int], tuple[int, int]]],
    graph: Graph,
    gap: float,
) -> list[Route]:
    chains: dict[tuple[int, int], list[int]] = {}
    routes = []
    for src, dst in edges:
        a, b = nodes[src[0]], nodes[dst[0]]
        value = a.outs[src[1]].value
        chain = chains.setdefault(src, [])
        via = []
        for layer in range(a.layer + 1, b.layer):
            k = layer - a.layer - 1
            if k == len(chain):
                port = Port(value, graph.values[value].axes)
                d = Placed("dummy", None, [port], [port], layer=layer)
                port.ys = tuple((i + 0.5) * gap for i in range(len(port.axes)))
                d.h = len(port.axes) * gap
                nodes.append(d)
                chain.append(len(nodes) - 1)
            via.append(chain[k])
        routes.append(Route(value, src, dst, via))
    return routes


def order(nodes: list[Placed], routes: list[Route]) -> list[list[int]]:
    """Barycenter sweeps: each layer sorted by the mean position of its neighbours."""
    depth = 1 + max(n.layer for n in nodes)
    layers: list[list[int]] = [[] for _ in range(depth)]
    for i, n in enumerate(nodes):
        layers[n.layer].append(i)
    # Neighbour positions carry the port's fraction, so wires into port 0 sort above port 1.
    up: dict[int, list[tuple[int, float]]] = {}
    down: dict[int, list[tuple[int, float]]] = {}
    for r in routes:
        chain = [r.src[0], *r.via, r.dst[0]]
        src_frac = r.src[1] / (len(nodes[r.src[0]].outs) + 1)
        dst_frac = r.dst[1] / (len(nodes[r.dst[0]].ins) + 1)
        for k, (a, b) in enumerate(itertools.pairwise(chain)):
            up.setdefault(b, []).append((a, src_frac if k == 0 else 0.0))
            down.setdefault(a, []).append((b, dst_frac if k == len(chain) - 2 else 0.0))
    pos = {i: k for members in layers for k, i in enumerate(members)}
    for sweep in range(SWEEPS):
        seq = range(1, depth) if sweep % 2 == 0 else range(depth - 2, -1, -1)
        links = up if sweep % 2 == 0 else down
        for layer in seq:
            members = layers[layer]
            key = {
                i: (
                    sum(pos[j] + f for j, f in links[i]) / len(links[i])
                    if links.get(i)
                    else float(pos[i])
                )
                for i in members
            }
            members.sort(key=lambda i: key[i])
            for k, i in enumerate(members):
                pos[i] = k
    return layers


def crossings(lay: Layout) -> int:
    """Pairs of value segments that cross between adjacent layers of one layout (its nested
    layouts not included): a measure of how tangled the ordering left it."""
    segments: dict[int, list[tuple[float, float]]] = {}
    for r in lay.routes:
        chain = [r.src, *((d, 0) for d in r.via), r.dst]
        for (a, pa), (b, pb) in itertools.pairwise(chain):
            na, nb = lay.nodes[a], lay.nodes[b]
            ya = na.y + mid(na.outs[pa] if (a, pa) == r.src else na.outs[0])
            yb = nb.y + mid(nb.ins[pb] if (b, pb) == r.dst else nb.ins[0])
            segments.setdefault(na.layer, []).append((ya, yb))
    count = 0
    for segs in segments.values():
        for i, (a0, a1) in enumerate(segs):
            for b0, b1 in segs[i + 1 :]:
                if (a0 - b0) * (a1 - b1) < 0:
                    count += 1
    return count
