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


def test_age_leaves_objects_someone_froze_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused(age=True):
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
