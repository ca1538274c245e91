"""The collector's pause: off inside, as it was after, and with ``age`` what the block made is out of the young generation."""

import gc

import pytest

from kraftlake.metadata.collector import collector_paused


@pytest.mark.parametrize("before", [True, False])
@pytest.mark.parametrize("age", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(before: bool, age: bool) -> None:
    was = gc.isenabled()
    (gc.enable if before else gc.disable)()
    try:
        with collector_paused(age=age):
            assert not gc.isenabled()
        assert gc.isenabled() is before
        with pytest.raises(KeyError):
            with collector_paused(age=age):
                raise KeyError("a step that fails")
        assert gc.isenabled() is before
    finally:
        (gc.enable if was else gc.disable)()


def young(thing: object) -> bool:
    return any(o is thing for o in gc.get_objects(generation=0))


def test_age_moves_what_the_block_made_to_the_oldest_generation() -> None:
    gc.collect()  # counts from zero: no young collection of its own moves the blocks' objects meanwhile
    with collector_paused(age=True):
        aged = [[i] for i in range(3)]
    with collector_paused(age=False):
        kept_young = [[i] for i in range(3)]
    assert not young(aged)
    assert any(o is aged for o in gc.get_objects(generation=2))
    assert young(kept_young)


def tracked(thing: object) -> bool:
    """Whether the collector's generations hold ``thing`` (a frozen object is in none of them)."""
    return any(o is thing for o in gc.get_objects())


def test_age_leaves_objects_someone_froze_frozen() -> None:
    # (one object of ours is watched, not the freeze count: frozen objects that die meanwhile lower the count)
    mine = [[0]]
    gc.freeze()
    try:
        assert not tracked(mine)
        with collector_paused(age=True):
            pass
        assert not tracked(mine)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert tracked(mine)
