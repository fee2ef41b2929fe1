"""The item tree: scopes become nested blocks; only truly identical chained blocks fold xN."""

from __future__ import annotations

import ncd
from ncd import ops
from ncd_diagram.structure import Block, OpBox, Repeat, build


def _kinds(block):
    return [type(c).__name__ for c in block.children]


def test_gpt_blocks_fold_into_one_repeat_whose_body_is_the_first_block():
    g = ncd.nn.gpt(layers=6).graph
    root = build(g)
    reps = [c for c in root.children if isinstance(c, Repeat)]
    assert len(reps) == 1 and reps[0].count == 6
    assert reps[0].body.scope_label == "blocks.0" and reps[0].body.open
    assert reps[0].inputs == reps[0].blocks[0].inputs
    assert reps[0].outputs == reps[0].blocks[-1].outputs == reps[0].blocks[-1].outputs
    assert not any(isinstance(c, Repeat) for c in build(g, repeat=False).children)


def test_blocks_that_differ_do_not_fold():
    dm = ncd.Axis("d_model")
    a = ncd.nn.mlp(dm, "d_ff", label="a")
    b = ncd.nn.mlp(dm, "d_ff", label="b")  # a different d_ff axis: not the same structure
    root = build((a >> b).graph)
    assert _kinds(root) == ["Block", "Block"]
    ff = ncd.Axis("d_ff")
    same = ncd.nn.mlp(dm, ff, label="a") >> ncd.nn.mlp(dm, ff, label="b")
    assert _kinds(build(same.graph)) == ["Repeat"]
    relu = ncd.nn.mlp(dm, ff, activation="relu", label="c")
    assert _kinds(build((ncd.nn.mlp(dm, ff, label="a") >> relu).graph)) == ["Block", "Block"]


def test_blocks_whose_outputs_are_used_elsewhere_do_not_fold():
    dm, ff = ncd.Axis("d_model"), ncd.Axis("d_ff")
    m1, m2 = ncd.nn.mlp(dm, ff, label="m1"), ncd.nn.mlp(dm, ff, label="m2")

    @ncd.trace(inputs=[ncd.ArrayType((dm,))])
    def skip(x):
        h = m1(x)
        return m2(h) + h  # m1's output also feeds the add

    assert _kinds(build(skip.graph)) == ["Block", "Block", "OpBox"]


def test_depth_closes_blocks_and_ops_keep_their_marks():
    g = ncd.nn.transformer_block().graph
    root = build(g, depth=0)
    closed = [c for c in root.children if isinstance(c, Block)]
    assert closed and all(not c.open and not c.children for c in closed)
    full = build(g)
    ops_ = []

    def walk(b):
        for c in b.children:
            if isinstance(c, OpBox):
                ops_.append(c)
            elif isinstance(c, Block):
                walk(c)

    walk(full)
    assert sorted(o.node for o in ops_) == list(range(len(g.nodes)))
    einsum = next(o for o in ops_ if o.kind == "einsum")
    assert [a.name for a in einsum.contracted] == ["d_head"]
    assert {(a.name, b.name) for a, b in einsum.through} == {("seq", "seq"), ("seq_k", "seq_k")}
    linear = next(o for o in ops_ if o.label == "q")
    assert linear.learned == ("attn.q.weight", "attn.q.bias")
    assert [a.name for a in linear.loop] == ["seq"]


def test_views_pass_their_axes_through():
    s = ncd.Axis("s")
    t = ncd.Axis("t")
    root = build(ops.rename(s, t).graph)
    box = root.children[0]
    assert isinstance(box, OpBox) and [(a.name, b.name) for a, b in box.through] == [("s", "t")]


def test_layout_leaves_no_crossing_bundles_in_the_standard_blocks():
    import ncd_diagram as nd
    from ncd_diagram.layout import crossings, walk

    for model in (
        ncd.nn.transformer_block(),
        ncd.nn.multihead_attention(),
        ncd.nn.gpt(layers=2),
        ncd.nn.spherical_attention(),
    ):
        lay = nd.diagram(model, repeat=False).layout
        inner = [n.inner for _, n, *_ in walk(lay) if n.inner is not None]
        assert [crossings(sub) for sub in (lay, *inner)] == [0] * (1 + len(inner))


def test_layout_boxes_of_one_layout_never_overlap():
    import ncd_diagram as nd
    from ncd_diagram.layout import walk

    lay = nd.diagram(ncd.nn.gpt(layers=3), repeat=False).layout
    groups: dict[int, list] = {}
    for sub, n, x, y, _ in walk(lay):
        groups.setdefault(id(sub), []).append((x, y, x + n.w, y + n.h))
    for boxes in groups.values():
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
